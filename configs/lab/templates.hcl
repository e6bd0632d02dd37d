template "jupyter" {
  description = "JupyterLab on port 8888 for the VM's owner, course notebooks cloned"
  file        = "templates/jupyter.yaml"
  vars = {
    notebooks = ""
  }
}
