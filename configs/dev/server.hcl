# configs/dev — what `make run` uses on a machine without GPUs.
#
# gpuvmd runs against a simulated 8× H100 PCIe 80GB server (pkg/host/sim,
# preset h100x8): the backends apply the kernel's and the driver's rules to a
# fake sysfs and NVML, and every output says it is simulated. libvirt is the
# real one; the guest is the project's tiny test guest (test/guest), booted
# directly from a kernel and an initrd, so no disk image is needed.
#
# Relative paths are relative to this file: state goes to .cache/run at the
# top of the repository, as the Makefile's RUN_STATE does.

server {
  listen    = "127.0.0.1:8080"
  state_dir = "../../.cache/run"
  log_level = "debug"

  # SQLite at state_dir/gpuvm.db (the default).
  database {
    driver = "sqlite"
  }

  libvirt {
    uri          = "qemu:///system"
    storage_pool = "gpuvm-dev"
    # The pool of the VMs' cloud-init seeds: gpuvmd makes it when libvirt
    # has none of that name, here, where QEMU (user libvirt-qemu) can read
    # it: not in the checkout, which may be a private home. With
    # --libvirt-uri test:///default the pool lives in the test driver's
    # memory and nothing is made on disk.
    storage_pool_dir = "/var/lib/libvirt/images/gpuvm-dev"
    # images_dir defaults to state_dir/images
  }

  plugins {
    # bin/plugins is where `make build` puts the backend binaries.
    dir      = "../../bin/plugins"
    backends = ["vgpu", "mig", "passthrough"]
  }

  host {
    simulate = "h100x8"

    # The preset has GPUs 0-3 in MIG mode; pin them so the scheduler keeps
    # carving MIG instances there.
    gpu "0000:18:00.0" { mode = "mig" }
    gpu "0000:2a:00.0" { mode = "mig" }
    gpu "0000:3a:00.0" { mode = "mig" }
    gpu "0000:5d:00.0" {
      mode       = "mig"
      mig_layout = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    }

    # GPUs 4-6 give time-sliced vGPUs; the last one (no SR-IOV VFs in the
    # preset) is left to passthrough.
    gpu "0000:9a:00.0" { mode = "vgpu" }
    gpu "0000:ab:00.0" { mode = "vgpu" }
    gpu "0000:ba:00.0" { mode = "vgpu" }
    gpu "0000:db:00.0" { mode = "passthrough" }
  }

  # Every person's home, in each of their VMs over virtiofs, at /gpuvm/home
  # in the guest: under state_dir/homes (.cache/run/homes), since root is
  # not set. Needs QEMU's virtiofsd (Debian: qemu-system-common).
  storage {
    homes {}
  }
}
