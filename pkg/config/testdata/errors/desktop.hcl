profile "typo" {
  boot { kernel = "/boot/vmlinuz" }
  desktop {
    protocol = "rpd"
  }
}

profile "console-port" {
  boot { kernel = "/boot/vmlinuz" }
  desktop {
    protocol = "vnc"
    port     = 5901
  }
}

profile "not-the-display" {
  boot { kernel = "/boot/vmlinuz" }
  desktop {
    protocol = "spice"
  }
}

profile "no-network" {
  boot { kernel = "/boot/vmlinuz" }
  network {
    type = "none"
  }
  desktop {
    protocol = "rdp"
    port     = 70000
    session  = "main"
  }
}

profile "sunshine" {
  boot { kernel = "/boot/vmlinuz" }
  desktop {
    protocol    = "sunshine"
    port        = 65530
    credentials = "env"
  }
}

profile "sunshine-web" {
  boot { kernel = "/boot/vmlinuz" }
  desktop {
    protocol = "sunshine"
    web_port = 48010
  }
}

profile "dcv" {
  boot { kernel = "/boot/vmlinuz" }
  desktop {
    protocol = "dcv"
    session  = "my session"
    web_port = 8444
  }
}

profile "empty" {
  boot { kernel = "/boot/vmlinuz" }
  desktop {
  }
}
