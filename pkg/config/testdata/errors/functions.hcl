image "ubuntu" {
  path = env("IMAGE")
}

image "debian" {
  path        = "debian.qcow2"
  description = file("/etc/passwd")
}

image "alpine" {
  path        = "alpine.qcow2"
  description = format("%999999999d", 1)
}

image "fedora" {
  path        = "fedora.qcow2"
  description = join(",", [for s in ["a", "b"] : upper(s)])
  user        = timestamp()
}
