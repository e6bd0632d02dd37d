# What the engineers ask for. By day: a development VM on a MIG slice
# (interactive). At night and at weekends: training on whole GPUs (batch).

profile "dev-small" {
  description = "Development VM on a 1g.10gb MIG slice: editing, small tests"
  vcpus       = 4
  memory      = "16GiB"
  disk {
    image = "ubuntu-22.04-cuda"
    size  = "100GiB"
  }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }
  cloud_init {
    template = "dev"
  }
  class = "interactive"
  lease {
    default   = "10h"
    max       = "12h"
    idle_stop = "2h"
  }
}

profile "dev" {
  description = "Development VM on a 2g.20gb MIG slice: the everyday one"
  vcpus       = 8
  memory      = "32GiB"
  disk {
    image = "ubuntu-22.04-cuda"
    size  = "200GiB"
  }
  gpu {
    kind    = "mig"
    profile = "2g.20gb"
  }
  cloud_init {
    template = "dev"
  }
  class = "interactive"
  lease {
    default   = "10h"
    max       = "12h"
    idle_stop = "2h"
  }
}

profile "dev-large" {
  description = "Development VM on a 3g.40gb MIG slice: big notebooks, profiling"
  vcpus       = 12
  memory      = "64GiB"
  disk {
    image = "ubuntu-22.04-cuda"
    size  = "300GiB"
  }
  gpu {
    kind    = "mig"
    profile = "3g.40gb"
  }
  cloud_init {
    template = "dev"
    vars = {
      packages = ["git", "tmux", "htop", "nvtop", "linux-tools-generic"]
    }
  }
  class = "interactive"
  lease {
    default   = "10h"
    max       = "12h"
    idle_stop = "2h"
  }
}

profile "explore" {
  description = "Whatever slice with at least 10 GiB is free: the scheduler picks the cheapest"
  vcpus       = 4
  memory      = "16GiB"
  disk {
    image = "ubuntu-22.04-cuda"
  }
  gpu {
    memory = "10GiB"
    kinds  = ["mig"]
  }
  cloud_init {
    template = "dev"
  }
  lease {
    default   = "4h"
    max       = "8h"
    idle_stop = "1h"
  }
}

profile "train" {
  description = "Training on one whole A100 80GB, at night or at the weekend"
  vcpus       = 16
  memory      = "120GiB"
  disk {
    image = "ubuntu-22.04-cuda"
    size  = "500GiB"
  }
  gpu {
    kind  = "passthrough"
    model = "A100 SXM4 80GB"
  }
  cloud_init {
    template = "dev"
  }
  class = "batch"
  lease {
    default = "12h"
    max     = "3d"
  }
}

profile "train-4" {
  description = "Training on four whole A100 80GB (NVLink peers), for the weekend runs"
  vcpus       = 64
  memory      = "480GiB"
  disk {
    image = "ubuntu-22.04-cuda"
    size  = "1TiB"
  }
  gpu {
    kind  = "passthrough"
    model = "A100 SXM4 80GB"
    count = 4
  }
  cloud_init {
    template = "dev"
  }
  groups   = ["ml"]
  shares   = ["team-data"]
  class    = "batch"
  priority = 10
  lease {
    default = "2d"
    max     = "3d"
  }
}
