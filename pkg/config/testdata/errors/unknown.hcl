profile "web" {
  vcpu   = 4
  memory = "8GiB"
  disk {
    image = "ubuntu"
  }
  gpus {
    kind = "vgpu"
  }
}

profiles "x" {
}

image "ubuntu" {
  path = "ubuntu.qcow2"
  frimware = "uefi"
}
