# A permissive policy for development: everyone may run two VMs at once,
# first come first served. Batch profiles (tiny-gpu, tiny-task: the tasks'
# profile) start at night only, as on a shared server: a task submitted by
# day waits, pending, for 22:00. Interactive profiles start at any hour.

policy {
  timezone = "UTC"

  queue {
    order = "fifo"
  }

  defaults {
    quota {
      vms    = 2
      slices = 2
    }
  }

  # By day, interactive VMs only: a batch VM waits for the night.
  window "day" {
    days    = "daily"
    hours   = "07:00-22:00"
    classes = ["interactive"]
  }

  # At night, batch VMs (tasks) too. What is still running at 07:00 goes
  # on: a task ends with its command or its time limit.
  window "night" {
    days    = "daily"
    hours   = "22:00-07:00"
    classes = ["interactive", "batch"]
  }
}
