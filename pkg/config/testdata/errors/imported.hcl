# An imported image names a record of the store; these are wrong before
# the store is asked.
image "with-path" {
  imported = "ubuntu"
  path     = "ubuntu.qcow2"
  format   = "qcow2"
}

image "bad-name" {
  imported = "Ubuntu Desk"
}

image "bad-version" {
  imported = "ubuntu"
  version  = 0
}

image "version-of-a-file" {
  path    = "ubuntu.qcow2"
  version = 2
}

image "good" {
  imported = "ubuntu-desk"
  version  = 3
  os       = "linux"
}

profile "desk" {
  disk { image = "good" }
}
