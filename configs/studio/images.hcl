# The studio's two golden images, kept as volumes of the "gpuvm" pool.

image "win11-dcc" {
  description = "Windows 11 with Houdini, Maya and the NVIDIA vGPU guest driver"
  volume      = "win11-dcc-2026.1.qcow2"
  os          = "windows"
  firmware    = "uefi"
  user        = "artist"
  # The virtio drivers, for reinstalls and driver updates (Debian and Fedora
  # ship virtio-win.iso; put it in the images directory).
  drivers_iso = "virtio-win.iso"
}

image "rocky9-comp" {
  description = "Rocky Linux 9 with Nuke, Blender and the NVIDIA vGPU guest driver"
  volume      = "rocky9-comp-2026.1.qcow2"
  os          = "linux"
  firmware    = "uefi"
  user        = "artist"
}
