profile "web" {
  vcpus  = "many"
  memory = 8
  tpm    = "yes"
  users  = "alice"
  boot {
    kernel = "vmlinuz"
  }
  boot {
    kernel = "vmlinuz2"
  }
}
