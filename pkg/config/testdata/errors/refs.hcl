image "ubuntu-24.04" {
  path = "ubuntu-24.04.qcow2"
}

template "dev" {
  content = "#cloud-config\nhostname: ${hostname}\n"
  vars = {
    packages = ["git"]
  }
}

profile "web" {
  disk {
    image = "ubuntu-24.4"
  }
  cloud_init {
    template = "devel"
  }
  groups = ["artist", "staff"]
}

profile "dev" {
  disk {
    image = "ubuntu-24.04"
  }
  cloud_init {
    template = "dev"
    vars = {
      pakages = ["vim"]
    }
  }
}

policy {
  group "artists" {}
  group "staff" {}

  reservations {
    groups   = ["staf"]
    profiles = ["dev", "wbe"]
  }
}
