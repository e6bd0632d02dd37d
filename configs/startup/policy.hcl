# The rules of sharing. Each engineer has a quota; the ML team may take more
# whole GPUs; the queue is fair-share, so whoever used least lately goes first.

policy {
  timezone = "Europe/Berlin"

  queue {
    order     = "fairshare"
    half_life = "7d"
  }

  # Anyone without a user block (new hires, contractors).
  defaults {
    quota {
      vms                = 1
      slices             = 1
      gpus               = 0
      gpu_hours_per_week = 20
    }
  }

  group "engineers" {} # the defaults' quota

  group "ml" {
    priority = 20
    quota {} # no limits: the ML team trains on whole GPUs
  }

  # Everyone has a slice by day and may train at night; GPU-hours count a
  # MIG slice as its share of the GPU.
  user "ana" { # CTO: rarely trains, must never wait for a slice
    priority = 50
    quota {
      vms    = 2
      slices = 2
      gpus   = 1
    }
  }
  user "ben" {
    quota {
      vms                = 2
      slices             = 1
      gpus               = 4
      gpu_hours_per_week = 200
    }
  }
  user "chen" {
    quota {
      vms                = 2
      slices             = 1
      gpus               = 4
      gpu_hours_per_week = 200
    }
  }
  user "dara" {
    quota {
      vms                = 2
      slices             = 1
      gpus               = 2
      gpu_hours_per_week = 80
    }
  }
  user "eli" {
    quota {
      vms                = 1
      slices             = 1
      gpus               = 1
      gpu_hours_per_week = 40
    }
  }
  user "femi" {
    quota {
      vms                = 1
      slices             = 1
      gpus               = 1
      gpu_hours_per_week = 40
    }
  }
  user "gus" { # intern
    preemptible = true
    quota {
      vms                = 1
      slices             = 1
      gpus               = 1
      gpu_hours_per_day  = 8
      gpu_hours_per_week = 30
    }
  }

  # Working hours: development only. Interactive VMs get half an hour's
  # warning before the evening; they may stay, but training starts then.
  window "day" {
    days        = "mon-fri"
    hours       = "09:00-19:00"
    classes     = ["interactive"]
    at_end      = "warn"
    warn_before = "30m"
  }

  # Weeknights: training. Jobs still running at 09:00 are stopped so the
  # GPUs can go back to MIG for the day.
  window "night" {
    days        = "mon-thu"
    hours       = "19:00-09:00"
    classes     = ["batch"]
    at_end      = "stop"
    warn_before = "1h"
  }

  # From Friday evening to Monday morning: long training runs.
  window "weekend" {
    from        = "fri 19:00"
    to          = "mon 09:00"
    classes     = ["batch", "interactive"]
    at_end      = "stop"
    warn_before = "2h"
  }

  # The ML team may book whole GPUs ahead for a deadline run.
  reservations {
    groups     = ["ml"]
    profiles   = ["train", "train-4"]
    max_ahead  = "14d"
    max_length = "3d"
    max_vms    = 1
    max_active = 1
  }

  alert "gpu-hot" {
    metric   = "gpu_temperature"
    above    = 85
    duration = "5m"
    webhook  = "https://hooks.example.com/services/gpuvm-ops"
  }

  alert "queue-stuck" {
    metric   = "queue_wait"
    above    = 3600
    duration = "10m"
    webhook  = "https://hooks.example.com/services/gpuvm-ops"
  }
}
