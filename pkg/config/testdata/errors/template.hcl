template "broken" {
  content = <<-EOT
    #cloud-config
    hostname: ${host_name}
    runcmd:
      - ${upper(user)}
      - ${env("HOME")}
    EOT
  vars = {
    user  = "x"
    motd  = "hello"
  }
}

template "missing" {
  file = "no-such-template.yaml"
}

template "empty" {
}
