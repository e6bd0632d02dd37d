image "ubuntu-24.04-ml" {
  description = "Ubuntu 24.04 with CUDA, PyTorch and JupyterLab"
  path        = "ubuntu-24.04-ml.qcow2"
  user        = "student"
}
