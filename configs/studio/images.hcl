# The studio's two golden images, kept as volumes of the "gpuvm" pool.

image "win11-dcc" {
  description = "Windows 11 with Houdini, Maya and the NVIDIA vGPU guest driver"
  volume      = "win11-dcc-2026.1.qcow2"
  os          = "windows"
  firmware    = "uefi"
  user        = "artist"
}

image "rocky9-comp" {
  description = "Rocky Linux 9 with Nuke, Blender and the NVIDIA vGPU guest driver"
  volume      = "rocky9-comp-2026.1.qcow2"
  os          = "linux"
  firmware    = "uefi"
  user        = "artist"
}
