policy {
  timezone = "Europe/Pariss"

  queue {
    order     = "fair"
    half_life = "7d"
  }

  user "alice" {
    priority = 10
    quota {
      vms               = -1
      gpu_memory        = "40G"
      gpu_hours_per_day  = 30
      gpu_hours_per_week = 20
    }
  }
  user "alice" {}
  group "bad name" {}
  group "art" {
    snapshots {
      keep         = 1001
      expire_after = "0s"
    }
  }
  user "bob" {
    snapshots {
      expire_after = "soon"
    }
  }

  window "day" {
    days    = "mon-fry"
    hours   = "09:00-25:00"
    classes = ["interactive"]
  }
  window "evening" {
    days        = "mon-fri"
    hours       = "18:00-18:00"
    classes     = ["batch", "gpu"]
    at_end      = "kill"
  }
  window "weekend" {
    days    = "sat,sun"
    from    = "fri 18:00"
    classes = ["batch"]
  }

  alert "hot" {
    metric  = "gpu_temp"
    webhook = "ftp://example.com/hook"
  }
  alert "busy" {
    metric   = "gpu_utilization"
    above    = 10
    below    = 90
    duration = "5 minutes"
    webhook  = "https://hooks.example.com/gpuvm"
  }
}
