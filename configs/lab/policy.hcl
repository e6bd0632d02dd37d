# Students: one slice each, preemptible by staff, ten GPU-hours a week (a
# 1g.5gb slice counts as 1/7 of a GPU, so that is 70 hours on a slice).
# Staff: priority. The ML101 course books its weekly lab session ahead.

policy {
  timezone = "America/New_York"

  queue {
    order = "priority"
  }

  defaults {
    quota {
      vms = 0 # not in a group below: no VM
    }
    # Each person keeps at most five disk snapshots, for a month at most.
    snapshots {
      keep         = 5
      expire_after = "30d"
    }
    # A home of 50 GiB each, and data disks of 200 GiB in all.
    storage {
      home_quota = "50GiB"
      disk_quota = "200GiB"
    }
  }

  group "students" {
    preemptible = true
    quota {
      vms                = 1
      slices             = 1
      gpu_hours_per_week = 10
    }
    snapshots {
      keep         = 2
      expire_after = "7d"
    }
    storage {
      home_quota = "10GiB"
      disk_quota = "20GiB"
    }
  }

  group "ml101" {
    quota {
      vms    = 1
      slices = 1
    }
  }

  group "staff" {
    priority = 100
    quota {
      vms    = 3
      slices = 3
    }
  }

  # Teaching assistants book the Thursday lab session: up to 21 slices (three
  # GPUs' worth) for up to four hours, a month ahead.
  reservations {
    groups     = ["staff"]
    profiles   = ["ml101-lab"]
    max_ahead  = "30d"
    max_length = "4h"
    max_vms    = 21
    max_active = 4
  }

  alert "queue-long" {
    metric   = "queue_length"
    above    = 10
    duration = "15m"
    webhook  = "https://hooks.example.edu/gpu-lab"
  }

  alert "backend-down" {
    metric   = "backend_down"
    above    = 0
    duration = "1m"
    webhook  = "https://hooks.example.edu/gpu-lab"
  }
}
