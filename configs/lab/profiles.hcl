profile "student" {
  description = "A student's notebook VM on one 1g.5gb MIG slice"
  vcpus       = 2
  memory      = "8GiB"
  disk {
    image = "ubuntu-24.04-ml"
    size  = "40GiB"
  }
  gpu {
    kind    = "mig"
    profile = "1g.5gb"
  }
  cloud_init {
    template = "jupyter"
  }
  groups = ["students", "staff"]
  lease {
    default   = "3h"
    max       = "8h"
    idle_stop = "30m"
  }
}

profile "staff" {
  description = "Staff and teaching assistants: a 3g.20gb MIG slice"
  vcpus       = 8
  memory      = "32GiB"
  disk {
    image = "ubuntu-24.04-ml"
    size  = "200GiB"
  }
  gpu {
    kind    = "mig"
    profile = "3g.20gb"
  }
  cloud_init {
    template = "jupyter"
  }
  groups   = ["staff"]
  priority = 50
  lease {
    default = "8h"
    max     = "7d"
  }
}

profile "ml101-lab" {
  description = "ML101 lab session: a 1g.5gb slice with the course notebooks"
  vcpus       = 2
  memory      = "8GiB"
  disk {
    image = "ubuntu-24.04-ml"
    size  = "40GiB"
  }
  gpu {
    kind    = "mig"
    profile = "1g.5gb"
  }
  cloud_init {
    template = "jupyter"
    vars = {
      notebooks = "https://git.example.edu/ml101/labs.git"
    }
  }
  groups = ["ml101", "staff"]
  shares = ["ml101-data"]
  lease {
    default = "2h"
    max     = "4h"
  }
}
