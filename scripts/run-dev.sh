#!/usr/bin/env bash
# Starts gpuvmd on configs/dev (a simulated h100x8 server, real libvirt and
# QEMU booting the tiny guest). Used by `make run` when the machine has no
# NVIDIA GPU.
#
# QEMU runs as the user libvirt-qemu and must reach the guest's kernel, its
# initrd and the disk images. A checkout under a private directory (root's
# home is 0700 on Debian) is out of its reach: then the files gpuvmd needs
# are copied, in the same relative layout, to a directory QEMU can walk
# (RUN_DEV_DIR, default /var/lib/gpuvm/dev), and gpuvmd runs from there.
set -euo pipefail

bin=${1:?usage: run-dev.sh BIN_DIR STATE_DIR LISTEN}
state=${2:?}
listen=${3:?}
root=$(pwd)

# configs/dev's desktop profile boots the desktop guest, which `make run`
# does not build: without it gpuvmd marks the profile unavailable and
# refuses its VMs. Say how to get it.
if [ ! -s "$root/test/guest/desktop/cache/desktop.qcow2" ]; then
	echo "The desktop guest is not built: profile desktop is unavailable (gpuvmd refuses its VMs) until it is."
	echo "  Build it with 'make desktop-image' (as root, about 5 minutes the first time), or run 'make run DESKTOP=1'."
fi

qemu_can_read() {
	id libvirt-qemu >/dev/null 2>&1 || return 0 # no such user: nothing to check
	[ "$(id -u)" -eq 0 ] || return 0             # only root can check as another user
	runuser -u libvirt-qemu -- test -r "$1"
}

if ! qemu_can_read "$root/test/guest/cache/vmlinuz"; then
	dev=${RUN_DEV_DIR:-/var/lib/gpuvm/dev}
	echo "QEMU (user libvirt-qemu) cannot reach $root: running from a copy in $dev."
	install -d -m 0755 "$dev" "$dev/configs" "$dev/test/guest" "$dev/bin"
	rm -rf "$dev/configs/dev" "$dev/test/guest/cache" "$dev/bin/plugins"
	cp -r "$root/configs/dev" "$dev/configs/dev"
	cp -r "$root/test/guest/cache" "$dev/test/guest/cache"
	# The desktop profile's cloud-init template, and its image when built.
	install -d -m 0755 "$dev/templates/cloud-init"
	cp "$root/templates/cloud-init/desktop.yaml" "$dev/templates/cloud-init/"
	rm -rf "$dev/test/guest/desktop"
	if [ -s "$root/test/guest/desktop/cache/desktop.qcow2" ]; then
		install -d -m 0755 "$dev/test/guest/desktop/cache"
		cp "$root"/test/guest/desktop/cache/{desktop.qcow2,vmlinuz,initrd.img} "$dev/test/guest/desktop/cache/"
	fi
	cp -r "$root/$bin/plugins" "$dev/bin/plugins"
	chmod -R a+rX "$dev/configs" "$dev/test" "$dev/templates" "$dev/bin"
	root=$dev
	if [ "$state" = "$(pwd)/.cache/run" ]; then
		state=$dev/.cache/run
	fi
fi
# The storage pool of configs/dev (server.libvirt.storage_pool) is gpuvmd's
# to make, at server.libvirt.storage_pool_dir (under /var/lib).
exec "$(pwd)/$bin/gpuvmd" --config "$root/configs/dev" --listen "$listen" --state-dir "$state"
