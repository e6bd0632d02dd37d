# The tiny test guest (test/guest/build.sh puts it in test/guest/cache): a
# Debian cloud kernel and a busybox initramfs that prints GPUVM-GUEST-READY on
# the serial console within seconds, even under software emulation. On
# libvirt's NAT network "default" (scripts/setup-host.sh starts it) it gets an
# address by DHCP, which makes the VM ready, and serves SSH (dropbear) to the
# owner's account with the keys given at create time: `gpuvm ssh NAME`.

template "tiny-seed" {
  description = "user-data for the tiny guest: the owner's account and SSH keys (it reads users and ssh_authorized_keys only)"
  content     = <<EOT
#cloud-config
hostname: ${hostname}
users:
  - name: ${user}
%{ if uid > 0 ~}
    uid: ${uid}
%{ endif ~}
    ssh_authorized_keys:
%{ for key in ssh_authorized_keys ~}
      - ${key}
%{ endfor ~}
EOT
}

profile "tiny" {
  description = "The tiny test guest: no disk, no GPU"
  vcpus       = 1
  memory      = "256MiB"

  boot {
    kernel  = "../../test/guest/cache/vmlinuz"
    initrd  = "../../test/guest/cache/initrd.img"
    cmdline = "console=ttyS0 panic=-1"
  }

  network {
    type   = "network"
    source = "default"
  }

  display {
    type = "vnc"
  }

  cloud_init {
    template = "tiny-seed"
  }

  lease {
    default   = "1h"
    max       = "4h"
    idle_stop = "30m"
  }
}

profile "tiny-mig" {
  description = "The tiny guest with the smallest MIG instance of an H100"
  vcpus       = 1
  memory      = "512MiB"

  boot {
    kernel  = "../../test/guest/cache/vmlinuz"
    initrd  = "../../test/guest/cache/initrd.img"
    cmdline = "console=ttyS0 panic=-1"
  }

  network {
    type   = "network"
    source = "default"
  }

  cloud_init {
    template = "tiny-seed"
  }

  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }

  lease {
    default = "1h"
    max     = "4h"
  }
}

profile "tiny-vgpu" {
  description = "The tiny guest with a 4 GB time-sliced compute vGPU of an H100"
  vcpus       = 1
  memory      = "512MiB"

  boot {
    kernel  = "../../test/guest/cache/vmlinuz"
    initrd  = "../../test/guest/cache/initrd.img"
    cmdline = "console=ttyS0 panic=-1"
  }

  network {
    type   = "network"
    source = "default"
  }

  cloud_init {
    template = "tiny-seed"
  }

  gpu {
    kind = "vgpu"
    type = "H100-4C"
  }

  lease {
    default = "1h"
    max     = "4h"
  }
}

profile "tiny-gpu" {
  description = "The tiny guest with a whole H100 (the passthrough GPU)"
  vcpus       = 2
  memory      = "1GiB"

  boot {
    kernel  = "../../test/guest/cache/vmlinuz"
    initrd  = "../../test/guest/cache/initrd.img"
    cmdline = "console=ttyS0 panic=-1"
  }

  network {
    type   = "network"
    source = "default"
  }

  cloud_init {
    template = "tiny-seed"
  }

  gpu {
    kind  = "passthrough"
    model = "H100"
  }

  class = "batch"

  lease {
    default = "1h"
    max     = "4h"
  }
}

profile "tiny-any" {
  description = "The tiny guest with at least 20 GiB of GPU memory, whatever is cheapest"
  vcpus       = 1
  memory      = "512MiB"

  boot {
    kernel  = "../../test/guest/cache/vmlinuz"
    initrd  = "../../test/guest/cache/initrd.img"
    cmdline = "console=ttyS0 panic=-1"
  }

  network {
    type   = "network"
    source = "default"
  }

  cloud_init {
    template = "tiny-seed"
  }

  gpu {
    memory = "20GiB"
    kinds  = ["mig", "vgpu"]
  }
}

profile "tiny-task" {
  description = "The tiny guest with the smallest MIG instance, for tasks (gpuvm task submit): batch, so it starts in the night window"
  vcpus       = 1
  memory      = "512MiB"

  boot {
    kernel  = "../../test/guest/cache/vmlinuz"
    initrd  = "../../test/guest/cache/initrd.img"
    cmdline = "console=ttyS0 panic=-1"
  }

  network {
    type   = "network"
    source = "default"
  }

  # The task's runner comes in the seed's vendor-data (docs/tasks.md).
  cloud_init {
    template = "tiny-seed"
  }

  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }

  class = "batch"

  lease {
    default = "1h"
    max     = "9h"
  }
}
