# /etc/gpuvm/server.hcl — this GPU server's gpuvmd (installed by the gpuvm
# package; your changes are kept on upgrade). Every .hcl file in /etc/gpuvm
# is read together: server.hcl, profiles.hcl, policy.hcl, and any you add.
#
# Check the whole directory after each change, then reload:
#   gpuvm config validate /etc/gpuvm && systemctl reload gpuvmd
# and check the host itself:
#   gpuvm admin doctor
#
# Everything below is commented out: the defaults are what gpuvmd uses.

server {
  # Where the API and the web page listen. 127.0.0.1 until you add tls.
  listen = "127.0.0.1:8080"

  # State: the SQLite database, the backends' ledgers, the admin's first
  # token (/var/lib/gpuvm/admin.token). Mode 0750, root's: QEMU does not
  # read here. The unit's sandbox lets gpuvmd write only here.
  state_dir = "/var/lib/gpuvm"

  # tls {
  #   cert = "/etc/gpuvm/tls/server.crt"
  #   key  = "/etc/gpuvm/tls/server.key"
  # }

  # Several servers share one PostgreSQL database:
  # database {
  #   driver = "postgres"
  #   dsn    = "postgres://gpuvm@db.example.org/gpuvm?sslmode=verify-full"
  # }

  libvirt {
    uri = "qemu:///system"
    # The libvirt directory pool of the VMs' disks and cloud-init seeds,
    # and where image paths are relative to: a place QEMU (libvirt-qemu)
    # can read. Make it once (gpuvm admin doctor prints the same line):
    #   virsh pool-define-as gpuvm dir --target /var/lib/libvirt/images/gpuvm &&
    #   virsh pool-build gpuvm && virsh pool-start gpuvm && virsh pool-autostart gpuvm
    storage_pool = "gpuvm"
    images_dir   = "/var/lib/libvirt/images/gpuvm"
  }

  # The backends, in /usr/lib/gpuvm/plugins: vgpu, mig, passthrough.
  # plugins {
  #   backends = ["vgpu", "mig", "passthrough"]
  # }

  # The mode of each GPU; gpuvm-host-prep.service puts them in it at boot
  # (gpuvm admin host-prep --dry-run shows how). Modes: vgpu, mig,
  # passthrough, auto (the scheduler switches an empty GPU).
  # host {
  #   gpu "all" {
  #     mode = "vgpu"
  #   }
  #   gpu "0000:41:00.0" {
  #     model = "H100 SXM5 80GB"
  #     mode  = "mig"
  #   }
  #   gpu "RTX 4090" {
  #     mode = "passthrough"
  #   }
  # }
}
