# A permissive policy for development: everyone may run two VMs at once,
# first come first served, no windows.

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
}
