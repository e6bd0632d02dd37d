# configs/studio — a studio of six artists sharing one 4× L40S workstation
# for look development, compositing and rendering.
#
# Each artist gets a Windows or Linux VM with a slice of an L40S: a Q-series
# (virtual workstation) vGPU, which drives a real desktop through SPICE. The
# GPUs run in mixed-size mode so a lead's 24 GB slice can sit next to an
# artist's 12 GB ones. Daytime is for people; renders run in the evening.

server {
  listen = "0.0.0.0:8443"

  tls {
    cert = "/etc/gpuvm/tls/studio.crt"
    key  = "/etc/gpuvm/tls/studio.key"
  }

  libvirt {
    uri          = "qemu:///system"
    storage_pool = "gpuvm"
    # Artists reach SPICE through gpuvmd's console proxy; QEMU itself
    # listens on loopback only.
    graphics_listen = "127.0.0.1"
  }

  plugins {
    backends = ["vgpu"]
  }

  host {
    gpu "all" {
      model      = "L40S"
      mode       = "vgpu"
      mixed_size = true
    }
  }

  # The shared asset library: leads curate it, artists read it. A Linux
  # seat asks for it with `gpuvm create comp --share assets`; Windows seats
  # do not get virtiofs shares.
  storage {
    share "assets" {
      description = "the studio's asset library (textures, HDRIs, plates)"
      path        = "/tank/assets"
      read_write  = ["group:leads"]
      read_only   = ["group:artists"]
    }
  }
}
