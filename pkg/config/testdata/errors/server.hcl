server {
  listen    = "0.0.0.0:80800"
  log_level = "verbose"
  allow_functions = ["env", "exec"]

  database {
    driver = "postgres"
  }

  libvirt {
    uri              = "qemu/system"
    storage_pool_dir = ""
    graphics_listen  = "everywhere"
  }

  plugins {
    backends = ["vgpu", "mig", "sriov"]
  }

  host {
    simulate = "h100x9"

    gpu "0000:41:00.0" {
      mode       = "vgpu"
      mig_layout = ["3g.40gb"]
    }
    gpu "41:00.0" {
      mode = "mig"
    }
    gpu "H100" {
      mode  = "passthrough"
      model = "H100 PCIe 80GB"
    }
    gpu "B100" {
      mode = "mig"
    }
    gpu "all" {
      mode       = "mig"
      model      = "A100 PCIe 40GB"
      mig_layout = ["4g.20gb", "3g.20gb", "1g.5gb"]
    }
    gpu "0000:81:00.0" {
      mode       = "vgpu"
      mixed_size = true
      model      = "GeForce RTX 4090"
    }
  }
}
