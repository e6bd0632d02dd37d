# Base images: each VM's disk is a copy-on-write overlay on one of these.

image "ubuntu-22.04-cuda" {
  description = "Ubuntu 22.04 with the NVIDIA driver, CUDA 12 and Docker"
  path        = "ubuntu-22.04-cuda12.qcow2" # in server.libvirt.images_dir
  os          = "linux"
  firmware    = "uefi"
  user        = "ubuntu"
}
