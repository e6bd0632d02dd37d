server {
  listen = "127.0.0.1:9090"
}

image "ubuntu" {
  volume = "ubuntu.qcow2"
}

image "ubuntu" {
  path = "/srv/ubuntu.qcow2"
}

profile "dev" {
  disk {
    image = "ubuntu"
  }
}

policy {}
policy {}
