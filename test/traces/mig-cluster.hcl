# 16 H100 80GB in MIG mode: two simulated h100x8 servers with every GPU
# pinned to MIG (the preset has only four in MIG mode).
host "gpu" {
  preset = "h100x8"
  count  = 2
  mode   = "mig"
}
