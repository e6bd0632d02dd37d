# Profiles for the rules tests: every lease ending, idle stops, classes,
# priorities and profiles restricted to groups and users.

profile "desk" {
  description = "An interactive desktop with a MIG slice"
  vcpus       = 4
  memory      = "16GiB"
  boot { kernel = "/k" }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }
  lease {
    default     = "4h"
    max         = "12h"
    idle_stop   = "45m"
    warn_before = "20m"
    on_end      = "stop"
    grace       = "2d"
  }
}

profile "desk-big" {
  vcpus  = 8
  memory = "32GiB"
  boot { kernel = "/k" }
  gpu {
    kind    = "mig"
    profile = "3g.40gb"
  }
  lease {
    default     = "4h"
    max         = "12h"
    idle_stop   = "45m"
    warn_before = "20m"
    on_end      = "stop"
    grace       = "2d"
  }
}

profile "train" {
  description = "A whole H100 for batch training"
  vcpus       = 16
  memory      = "128GiB"
  boot { kernel = "/k" }
  gpu {
    kind  = "passthrough"
    model = "H100"
  }
  class    = "batch"
  priority = 7
  groups   = ["staff"]
  users    = ["ada"]
  lease {
    default     = "1d"
    max         = "3d"
    warn_before = "0"
    on_end      = "delete"
  }
}

profile "ml101-lab" {
  description = "The ML101 course's lab seat"
  vcpus       = 2
  memory      = "8GiB"
  boot { kernel = "/k" }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }
  groups = ["ml101"]
  lease {
    default   = "2h"
    max       = "4h"
    idle_stop = "20m"
    on_end    = "keep"
  }
}
