server {
  listen = "127.0.0.1:8080"
}

profile "dev" {
  boot {
    kernel = "vmlinuz"
  }
}
