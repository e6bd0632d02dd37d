# configs/startup — a startup of seven engineers on one 8× A100 80GB server.
#
# By day the engineers develop on MIG slices (a 1g, 2g or 3g instance each,
# next to their own VM's desktop); at night and at weekends the same GPUs run
# training jobs whole. Two GPUs stay carved into MIG instances all the time so
# that a slice is always there in the morning; the other six are "auto": the
# scheduler switches an empty GPU between MIG and passthrough as the queue
# needs (a GPU changes mode only when it holds nothing).

server {
  # The API is reached from laptops on the office network: TLS.
  listen    = "0.0.0.0:8443"
  state_dir = "/var/lib/gpuvm"

  tls {
    cert = "/etc/gpuvm/tls/gpuvm.crt"
    key  = "/etc/gpuvm/tls/gpuvm.key"
  }

  # One server: SQLite in state_dir is enough.
  database {
    driver = "sqlite"
  }

  libvirt {
    uri          = "qemu:///system"
    storage_pool = "gpuvm"
    images_dir   = "/var/lib/gpuvm/images"
  }

  plugins {
    dir      = "/usr/lib/gpuvm/plugins"
    backends = ["mig", "passthrough"] # no time-sliced vGPU here
  }

  host {
    # Every GPU of this DGX-class box is the same board.
    gpu "all" {
      model = "A100 SXM4 80GB"
      mode  = "auto"
    }

    # Always-on MIG: two 3g.40gb for the heavier notebooks...
    gpu "0000:07:00.0" {
      mode       = "mig"
      mig_layout = ["3g.40gb", "3g.40gb"]
    }
    # ...and three 2g.20gb plus a 1g.10gb for everyday development.
    gpu "0000:0f:00.0" {
      mode       = "mig"
      mig_layout = ["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"]
    }
  }

  # The team's dataset: the ML group reads and writes it; other engineers
  # may mount it read-only with `gpuvm create --share team-data`. Its
  # checkpoints may take 2 TiB at most (refused past it where /tank has
  # project quotas; else measured, and the admins warned at 90 %).
  storage {
    share "team-data" {
      description = "the team's training data and checkpoints"
      path        = "/tank/datasets/team"
      mount       = "/data/team"
      read_write  = ["group:ml"]
      read_only   = ["group:engineers"]
      quota       = "2TiB"
    }
  }
}
