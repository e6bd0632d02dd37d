# Six people, four cards: first come, first served, one seat each; the two
# leads may hold a second seat. Renders wait for the evening.

policy {
  timezone = "Europe/London"

  queue {
    order = "fifo"
  }

  defaults {
    quota {
      vms    = 1
      slices = 1
    }
  }

  group "artists" {}

  group "leads" {
    priority = 10
    quota {
      vms        = 2
      slices     = 2
      gpu_memory = "72GiB"
    }
  }

  # Studio hours belong to the people at their desks: no render may start.
  # Seats get a 15-minute warning at eight; nothing is stopped.
  window "studio-hours" {
    days        = "mon-fri"
    hours       = "08:00-20:00"
    classes     = ["interactive"]
    at_end      = "warn"
    warn_before = "15m"
  }
  # Outside studio hours anything may start: renders and late seats.

  alert "seat-idle" {
    metric   = "vm_idle"
    above    = 3600
    duration = "1m"
    webhook  = "https://chat.example.com/hooks/studio-it"
  }

  alert "card-hot" {
    metric   = "gpu_temperature"
    above    = 83
    duration = "10m"
    webhook  = "https://chat.example.com/hooks/studio-it"
  }
}
