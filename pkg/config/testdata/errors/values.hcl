image "ubuntu" {
  path     = "ubuntu.qcow2"
  firmware = "efi"
  os       = "Linux"
}

profile "web" {
  vcpus  = 0
  memory = "32GB"
  disk {
    image = "ubuntu"
    size  = "lots"
  }
  display {
    type = "rdp"
  }
  network {
    type  = "bridge"
    model = "virtio-net"
  }
  lease {
    default   = "8hours"
    max       = "2h"
    idle_stop = "1h30"
  }
  class    = "interactiv"
  priority = 5000
}

profile "Bad Name" {
  boot {
    kernel = "vmlinuz"
  }
}
