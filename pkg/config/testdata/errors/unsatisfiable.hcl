# Valid, but some profiles can never run on this server: warnings.
server {
  plugins {
    backends = ["vgpu", "mig"]
  }
  host {
    simulate = "l40sx4"
    gpu "all" {
      mode       = "vgpu"
      mixed_size = true
    }
  }
}

image "ubuntu" {
  path = "ubuntu.qcow2"
}

profile "train" {
  disk { image = "ubuntu" }
  gpu {
    kind    = "mig"
    profile = "3g.40gb"
  }
}

profile "whole" {
  disk { image = "ubuntu" }
  gpu {
    kind = "passthrough"
  }
}

profile "compute" {
  disk { image = "ubuntu" }
  gpu {
    kind = "vgpu"
    type = "L40S-12C"
  }
}

profile "big" {
  disk { image = "ubuntu" }
  gpu {
    memory = "64GiB"
    kinds  = ["vgpu"]
  }
}

profile "render" {
  disk { image = "ubuntu" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
}
