# A policy that uses every feature of the policy block, for the rules
# tests (pkg/rules): its golden files and the test that every field set is
# written down.

policy {
  timezone = "Europe/Paris"
  webhook  = "https://hooks.example.com/gpuvm-notices?token=not-shown"

  queue {
    order     = "fairshare"
    half_life = "3d"
  }

  defaults {
    priority    = 5
    preemptible = true
    quota {
      vms                 = 1
      gpus                = 0
      slices              = 1
      gpu_memory          = "10GiB"
      gpu_hours_per_day   = 4
      gpu_hours_per_week  = 12
      gpu_hours_per_month = 40
    }
    snapshots {
      keep         = 3
      expire_after = "14d"
    }
    storage {
      home_quota = "50GiB"
      disk_quota = "200GiB"
    }
  }

  group "students" {
    preemptible = true
    snapshots {
      keep = 0
    }
    storage {
      home_quota = "10GiB"
    }
    quota {
      vms                = 1
      slices             = 1
      gpu_hours_per_week = 10
    }
  }

  group "ml101" {
    quota {
      vms              = 2
      slices           = 2
      gpu_hours_per_day = 6
    }
  }

  group "staff" {
    priority = 100
    quota {
      vms                 = 4
      gpus                = 2
      slices              = 4
      gpu_memory          = "160GiB"
      gpu_hours_per_day   = 48
      gpu_hours_per_week  = 200
      gpu_hours_per_month = 600
    }
  }

  user "ada" {
    priority    = 20
    preemptible = true
    snapshots {
      keep         = 10
      expire_after = "30d"
    }
    storage {
      home_quota = "100GiB"
      disk_quota = "1TiB"
    }
    quota {
      vms                 = 3
      gpus                = 1
      slices              = 2
      gpu_memory          = "80GiB"
      gpu_hours_per_day   = 24
      gpu_hours_per_week  = 100
      gpu_hours_per_month = 300
    }
  }

  window "day" {
    days        = "mon-fri"
    hours       = "09:00-18:00"
    classes     = ["interactive"]
    at_end      = "warn"
    warn_before = "15m"
  }

  window "weekend" {
    from        = "sat 00:00"
    to          = "mon 06:00"
    classes     = ["batch"]
    at_end      = "stop"
    warn_before = "30m"
  }

  window "maintenance" {
    days    = "wed"
    hours   = "06:00-07:00"
    classes = []
  }

  reservations {
    users      = ["ada"]
    groups     = ["staff", "ml101"]
    profiles   = ["ml101-lab", "train"]
    max_ahead  = "30d"
    max_length = "4h"
    max_vms    = 21
    max_active = 3
  }

  alert "gpu-hot" {
    metric   = "gpu_temperature"
    above    = 85
    duration = "5m"
    webhook  = "https://alerts.example.com/gpuvm"
  }

  alert "util-band" {
    metric   = "gpu_utilization"
    above    = 99
    below    = 1
    duration = "2h"
    webhook  = "https://alerts.example.com/gpuvm"
  }
}
