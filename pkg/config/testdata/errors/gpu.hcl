# Every way of naming a GPU slice wrongly.
image "ubuntu" {
  path = "ubuntu.qcow2"
}

profile "unknown-board" {
  disk { image = "ubuntu" }
  gpu {
    kind = "vgpu"
    type = "L40X-12Q"
  }
}

profile "no-such-size" {
  disk { image = "ubuntu" }
  gpu {
    kind = "vgpu"
    type = "L40S-7Q"
  }
}

profile "bad-grammar" {
  disk { image = "ubuntu" }
  gpu {
    kind = "vgpu"
    type = "L40S-12"
  }
}

profile "mig-backed" {
  disk { image = "ubuntu" }
  gpu {
    kind = "vgpu"
    type = "H100-3-40C"
  }
}

profile "bad-mig" {
  disk { image = "ubuntu" }
  gpu {
    kind    = "mig"
    profile = "3g.41gb"
  }
}

profile "mig-wrong-board" {
  disk { image = "ubuntu" }
  gpu {
    kind    = "mig"
    profile = "3g.40gb"
    model   = "A100 PCIe 40GB"
  }
}

profile "mixed-up" {
  disk { image = "ubuntu" }
  gpu {
    type   = "A40-8Q"
    memory = "8GiB"
  }
}

profile "abstract-extra" {
  disk { image = "ubuntu" }
  gpu {
    kind   = "mig"
    memory = "20GiB"
  }
}

profile "too-many" {
  disk { image = "ubuntu" }
  gpu {
    kind  = "passthrough"
    model = "H200 XL"
    count = 32
  }
}

profile "display-on-whole-gpu" {
  disk { image = "ubuntu" }
  gpu {
    kind  = "passthrough"
    model = "RTX 4090"
  }
  display {
    type         = "spice"
    vgpu_display = true
  }
}
