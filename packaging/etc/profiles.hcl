# /etc/gpuvm/profiles.hcl — what people may ask for. docs/install.md
# ("The first profile") walks through one; /usr/share/doc/gpuvm/examples
# holds complete configurations (lab, studio, startup).
#
# image "ubuntu-24.04" {
#   path     = "noble-server-cloudimg-amd64.img" # in images_dir
#   format   = "qcow2"
#   os       = "linux"
#   firmware = "uefi"
#   user     = "ubuntu"
# }
#
# profile "l40s-8q" {
#   description = "Ubuntu desktop with an L40S-8Q vGPU"
#   vcpus       = 8
#   memory      = "32GiB"
#   disk {
#     image = "ubuntu-24.04"
#     size  = "100GiB"
#   }
#   gpu {
#     kind = "vgpu"
#     type = "L40S-8Q"
#   }
#   display {
#     type = "vnc"
#   }
# }
