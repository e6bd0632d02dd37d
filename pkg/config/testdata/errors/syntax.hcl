profile "web" {
  vcpus = 4
  memory = "8GiB
}
