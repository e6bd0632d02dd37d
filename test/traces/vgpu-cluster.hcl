# 12 L40S in equal-size vGPU mode: three simulated l40sx4 servers with every
# GPU pinned to vGPU and mixed-size mode off (one vGPU type per GPU).
host "render" {
  preset     = "l40sx4"
  count      = 3
  mode       = "vgpu"
  mixed_size = false
}
