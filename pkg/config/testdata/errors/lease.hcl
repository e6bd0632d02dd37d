# What happens at the end of a lease, and where notices go.
profile "bad-on-end" {
  boot { kernel = "/boot/vmlinuz" }
  lease {
    on_end = "archive"
  }
}

profile "grace-without-stop" {
  boot { kernel = "/boot/vmlinuz" }
  lease {
    on_end = "delete"
    grace  = "2h"
  }
}

profile "zero-grace" {
  boot { kernel = "/boot/vmlinuz" }
  lease {
    grace = "0"
  }
}

profile "bad-warning" {
  boot { kernel = "/boot/vmlinuz" }
  lease {
    warn_before = "soon"
  }
}

profile "late-warning" {
  boot { kernel = "/boot/vmlinuz" }
  lease {
    default     = "1h"
    warn_before = "2h"
  }
}

profile "kept" {
  boot { kernel = "/boot/vmlinuz" }
  lease {
    on_end      = "keep"
    warn_before = "0"
  }
}

policy {
  webhook = "ftp://hooks.example.com/gpuvm"
}
