# The desktop guest (test/guest/desktop/build.sh, `make desktop-image`, cached
# in test/guest/desktop/cache): Debian bookworm with cloud-init, the QEMU
# guest agent, OpenSSH and xrdp + IceWM, booted directly from the kernel and
# initramfs built with it, its disk a copy-on-write overlay on the image.
# Reach its desktop with `gpuvm credentials NAME` (the one-time password)
# and `gpuvm rdp NAME` (or `gpuvm tunnel NAME 3389`).

image "desktop" {
  description = "Debian bookworm desktop: xrdp + IceWM (test/guest/desktop)"
  # Relative to server.libvirt.images_dir (.cache/run/images).
  path     = "../../../test/guest/desktop/cache/desktop.qcow2"
  format   = "qcow2"
  os       = "linux"
  firmware = "bios"
}

template "desktop-seed" {
  description = "The owner's account with their SSH keys and the one-time desktop password"
  file        = "../../templates/cloud-init/desktop.yaml"
}

profile "desktop" {
  description = "A Debian desktop over RDP with the smallest MIG instance of an H100"
  vcpus       = 2
  memory      = "1536MiB"

  disk {
    image = "desktop"
  }

  boot {
    kernel  = "../../test/guest/desktop/cache/vmlinuz"
    initrd  = "../../test/guest/desktop/cache/initrd.img"
    cmdline = "root=/dev/vda rw console=ttyS0"
  }

  network {
    type   = "network"
    source = "default"
  }

  display {
    type = "vnc"
  }

  # How people reach it: xrdp in the guest, through gpuvmd's tunnel
  # (gpuvm desktop NAME, or gpuvm rdp NAME).
  desktop {
    protocol = "rdp"
  }

  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }

  cloud_init {
    template = "desktop-seed"
  }

  lease {
    default   = "4h"
    max       = "12h"
    idle_stop = "1h"
  }
}
