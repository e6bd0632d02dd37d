# Seats. The L40S has 48 GB; in mixed-size mode Q types of different sizes
# share a GPU: four 12Q seats, or two 12Q and one 24Q, on each card.

profile "artist" {
  description = "Windows seat for modelling and animation: L40S-12Q, SPICE desktop"
  vcpus       = 8
  memory      = "32GiB"
  disk {
    image = "win11-dcc"
    size  = "250GiB"
  }
  tpm = true # Windows 11
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
  display {
    type         = "spice"
    vgpu_display = true # the vGPU draws the desktop SPICE shows
  }
  network {
    type   = "bridge"
    source = "br-studio" # on the studio LAN, for the license server
  }
  groups = ["artists", "leads"]
  class  = "interactive"
  lease {
    default   = "10h"
    max       = "14h"
    idle_stop = "90m"
  }
}

profile "lookdev" {
  description = "Windows seat for look development and lighting: L40S-24Q"
  vcpus       = 16
  memory      = "64GiB"
  disk {
    image = "win11-dcc"
    size  = "500GiB"
  }
  tpm = true
  gpu {
    kind = "vgpu"
    type = "L40S-24Q"
  }
  display {
    type         = "spice"
    vgpu_display = true
  }
  network {
    type   = "bridge"
    source = "br-studio"
  }
  groups   = ["leads"]
  class    = "interactive"
  priority = 10
  lease {
    default   = "10h"
    max       = "14h"
    idle_stop = "90m"
  }
}

profile "comp" {
  description = "Linux seat for compositing in Nuke: L40S-12Q"
  vcpus       = 8
  memory      = "48GiB"
  disk {
    image = "rocky9-comp"
    size  = "250GiB"
  }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
  display {
    type         = "spice"
    vgpu_display = true
  }
  network {
    type   = "bridge"
    source = "br-studio"
  }
  groups = ["artists", "leads"]
  lease {
    default   = "10h"
    max       = "14h"
    idle_stop = "90m"
  }
}

profile "render" {
  description = "Overnight render node: a whole L40S as one 48Q vGPU, headless"
  vcpus       = 32
  memory      = "128GiB"
  disk {
    image = "rocky9-comp"
    size  = "500GiB"
  }
  gpu {
    kind = "vgpu"
    type = "L40S-48Q"
  }
  display {
    type = "vnc" # the boot console only
  }
  network {
    type   = "bridge"
    source = "br-studio"
  }
  groups = ["artists", "leads"]
  class  = "batch"
  lease {
    default = "12h"
    max     = "14h"
  }
}
