# The configuration of the healthy captured host (healthy.txtar).
server {
  libvirt {
    uri          = "qemu:///system"
    storage_pool = "gpuvm"
  }
  host {
    gpu "0000:01:00.0" {
      model = "GeForce RTX 4090"
      mode  = "passthrough"
    }
    gpu "0000:18:00.0" {
      model = "H100 SXM5 80GB"
      mode  = "mig"
    }
    gpu "0000:c1:00.0" {
      model = "L40S"
      mode  = "vgpu"
    }
  }
  storage {
    homes {
      root = "/var/lib/gpuvm/homes"
    }
  }
}

profile "notebook" {
  memory = "16GiB"
  boot {
    kernel = "/var/lib/gpuvm/guest/vmlinuz"
  }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }
}
