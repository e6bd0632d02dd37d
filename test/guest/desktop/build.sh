#!/usr/bin/env bash
# build.sh: build gpuvm's desktop guest, a small bootable Debian bookworm
# disk image, from Debian's packages only.
#
#   test/guest/desktop/build.sh           build (or reuse) $CACHE/desktop.qcow2
#   test/guest/desktop/build.sh --force   rebuild even when the cache is current
#
# mmdebstrap (as root, no fakechroot) installs PACKAGES below from bookworm,
# bookworm-updates and bookworm-security into a directory tree (outside the
# repository: under $TMPDIR), rootfs/ is copied into it before the packages
# are installed (so that initramfs-tools finds its configuration) and again
# after (over what the packages wrote), mke2fs -d turns the tree into an ext4 file
# system without loop devices or mounts, and qemu-img converts it to a
# compressed qcow2. The file system fills the whole disk (no partition table,
# no bootloader): the guest boots directly from the kernel and initramfs that
# the build copies out of the tree next to the image (vmlinuz, initrd.img),
# with root=/dev/vda. Under software emulation this skips the firmware's and
# the bootloader's seconds, and needs neither grub-install nor a loop device;
# the cost is that a kernel upgrade inside the guest takes effect only when the
# image is rebuilt, which is what a throw-away desktop guest wants anyway.
#
# The guest: Debian's cloud kernel, 6.12 (linux-image-6.12-cloud-amd64, from
# bookworm-security: bookworm's default cloud kernel, 6.1, has no AHCI driver,
# and gpuvmd attaches the cloud-init seed as a SATA CD-ROM on q35), with an
# initramfs of only virtio_pci, virtio_blk and ext4 (MODULES=list),
# systemd with systemd-networkd (DHCP on the virtio NIC; cloud-init renders the
# seed's network-config for it), cloud-init (NoCloud only), qemu-guest-agent,
# openssh-server (host keys made at first boot by cloud-init, never shared
# between VMs), and xrdp + xorgxrdp (its TLS key made at first boot too) with
# IceWM and xterm as the desktop.
#
# Environment:
#   GPUVM_DESKTOP_CACHE    cache directory (default: test/guest/desktop/cache,
#                          git-ignored; /var/cache/gpuvm/desktop survives
#                          checkouts and is what `make test` uses as root)
#   GPUVM_DESKTOP_MIRROR   Debian mirror (default: http://deb.debian.org/debian)
#   GPUVM_DESKTOP_SECURITY_MIRROR   its security suite's (default:
#                          http://deb.debian.org/debian-security)
#
# Idempotent: the build is skipped when $CACHE/stamp matches the hash of this
# script and rootfs/ and the candidate versions of PACKAGES in apt's lists.
# The .debs of the last build are kept in $CACHE/debs, so a rebuild after a
# recipe change downloads only what changed. Concurrent runs serialise on $CACHE/.lock.
# Needs root, mmdebstrap, mke2fs (e2fsprogs) and qemu-img (qemu-utils). The
# last line on stdout is the image's path; the lines before it are
# "kernel=<path>" and "initrd=<path>".
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${GPUVM_DESKTOP_CACHE:-$here/cache}
mirror=${GPUVM_DESKTOP_MIRROR:-http://deb.debian.org/debian}
security=${GPUVM_DESKTOP_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
force=0
[ "${1:-}" = "--force" ] && force=1

log() { printf 'desktop image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
result() { printf 'kernel=%s\ninitrd=%s\n%s\n' "$cache/vmlinuz" "$cache/initrd.img" "$cache/desktop.qcow2"; }

SUITE=bookworm
# Virtual size of the disk; the overlay of a VM may be larger (cloud-init's
# resize_rootfs grows the file system at first boot).
DISK_SIZE=3G
PACKAGES=(
	systemd-sysv udev dbus libpam-systemd systemd-resolved e2fsprogs
	linux-image-6.12-cloud-amd64 initramfs-tools
	cloud-init qemu-guest-agent openssh-server sudo
	iproute2 procps less
	xrdp xorgxrdp xserver-xorg-core xauth xfonts-base
	icewm xterm openssl
)

mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
exec 9>"$cache/.lock"
flock 9

have_image() { [ -s "$cache/desktop.qcow2" ] && [ -s "$cache/vmlinuz" ] && [ -s "$cache/initrd.img" ]; }

# --- the stamp: recipe hash and package set -------------------------------

recipe_hash=$( (cat "$here/build.sh"; cd "$here/rootfs" && find . -type f | LC_ALL=C sort | xargs -d '\n' sha256sum) | sha256sum | cut -c1-16)
versions=$(apt-cache policy "${PACKAGES[@]}" 2>/dev/null | awk '
	/^[^ ].*:$/ { name = substr($0, 1, length($0) - 1) }
	/^  Candidate:/ { if ($2 != "(none)") print name "=" $2 }' | LC_ALL=C sort | tr '\n' ' ')
if [ "$(wc -w <<<"$versions")" -ne ${#PACKAGES[@]} ] && [ "$(id -u)" -eq 0 ] && ! have_image; then
	log "apt's lists lack some of the packages: running apt-get update"
	apt-get update -qq >&2 || log "apt-get update failed"
	exec 9>&-
	exec "$0" "$@"
fi
stamp="suite=$SUITE recipe=$recipe_hash packages: $versions"
if [ $force -eq 0 ] && have_image && [ "$(cat "$cache/stamp" 2>/dev/null)" = "$stamp" ]; then
	result
	exit 0
fi
if [ "$(wc -w <<<"$versions")" -ne ${#PACKAGES[@]} ] && have_image; then
	log "apt's lists do not know all of ${PACKAGES[*]} (run apt-get update?); using the cached image"
	result
	exit 0
fi

[ "$(id -u)" -eq 0 ] || die "building the image needs root (mmdebstrap in root mode); run as root or point GPUVM_DESKTOP_CACHE at a built one"
for tool in mmdebstrap mke2fs qemu-img; do
	command -v "$tool" >/dev/null || die "$tool not found: run scripts/setup-host.sh (it installs mmdebstrap, e2fsprogs and qemu-utils)"
done
log "building in $cache: $stamp"
start=$(date +%s)

# The tree is built outside the repository: go commands walking ./... must
# never meet its /proc and /sys mounts.
work=$(mktemp -d "${TMPDIR:-/var/tmp}/gpuvm-desktop.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache/debs" "$work/debs"
root="$work/root"

# --- install --------------------------------------------------------------

# The apt cache is synced in and out so that .debs survive between builds
# (mmdebstrap's documented recipe); policy-rc.d keeps services from starting
# inside the tree; the SSH host keys and the machine id are removed so that
# every VM makes its own at first boot. dpkg does not sync each file it
# unpacks (force-unsafe-io): a build that fails leaves only a tree that is
# thrown away.
include=$(
	IFS=,
	echo "${PACKAGES[*]}"
)
mmdebstrap --mode=root --variant=apt --format=directory \
	--aptopt='APT::Install-Recommends "false"' \
	--aptopt='Acquire::Retries "3"' \
	--dpkgopt='force-confold' --dpkgopt='force-confdef' --dpkgopt='force-unsafe-io' \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-include=/usr/share/locale/locale.alias' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--include="$include" \
	--skip=download/empty --skip=essential/unlink \
	--setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
	--setup-hook="sync-in '$cache/debs' /var/cache/apt/archives/" \
	--essential-hook="cp -R '$here/rootfs/.' \"\$1/\"" \
	--customize-hook="sync-out /var/cache/apt/archives '$work/debs'" \
	--customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb' \
	"$SUITE" "$root" \
	"deb $mirror $SUITE main" "deb $mirror $SUITE-updates main" "deb $security $SUITE-security main" \
	>&2 || die "mmdebstrap failed"

# Keep the .debs of this package set only (a new kernel replaces the old
# one): those of the packages installed, at the versions installed.
installed=$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Package} ${Version}\n')
for deb in "$work"/debs/*.deb; do
	[ -e "$deb" ] || continue
	grep -qxF "$(dpkg-deb --show --showformat='${Package} ${Version}' "$deb")" <<<"$installed" || rm -f "$deb"
done
rm -rf "$cache/debs.old"
mv "$cache/debs" "$cache/debs.old"
mv "$work/debs" "$cache/debs"
rm -rf "$cache/debs.old"

# --- configure ------------------------------------------------------------

cp -R "$here/rootfs/." "$root/"
rm -f "$root"/etc/ssh/ssh_host_*
# xrdp's TLS key is made per VM at first boot (gpuvm-xrdp-cert.service);
# until then there is none rather than one every copy of the image shares.
rm -f "$root/etc/xrdp/key.pem" "$root/etc/xrdp/cert.pem"
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
echo "gpuvm-desktop" >"$root/etc/hostname"
# Units that cost time under emulation and do nothing for a short-lived VM.
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer man-db.timer; do
	rm -f "$root/etc/systemd/system/timers.target.wants/$u" "$root/etc/systemd/system/multi-user.target.wants/$u" "$root/etc/systemd/system/default.target.wants/$u"
done
mkdir -p "$root/etc/systemd/system/multi-user.target.wants" "$root/etc/systemd/system/sockets.target.wants"
ln -sf /lib/systemd/system/systemd-networkd.service "$root/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
ln -sf /lib/systemd/system/systemd-networkd.socket "$root/etc/systemd/system/sockets.target.wants/systemd-networkd.socket"
ln -sf /etc/systemd/system/gpuvm-xrdp-cert.service "$root/etc/systemd/system/multi-user.target.wants/gpuvm-xrdp-cert.service"
# The virtio NIC is the only one: waiting for "any" link is enough.
mkdir -p "$root/etc/systemd/system/systemd-networkd-wait-online.service.d"
printf '[Service]\nExecStart=\nExecStart=/lib/systemd/systemd-networkd-wait-online --any --timeout=60\n' \
	>"$root/etc/systemd/system/systemd-networkd-wait-online.service.d/any.conf"
echo "$stamp" >"$root/etc/gpuvm-desktop"

vmlinuz=$(find "$root/boot" -maxdepth 1 -name 'vmlinuz-*' -print | sort | tail -n 1)
initrd=$(find "$root/boot" -maxdepth 1 -name 'initrd.img-*' -print | sort | tail -n 1)
[ -n "$vmlinuz" ] || die "no /boot/vmlinuz-* in the tree"
[ -n "$initrd" ] || die "no /boot/initrd.img-* in the tree (initramfs-tools did not run?)"
kver=${vmlinuz##*/vmlinuz-}

# --- pack -----------------------------------------------------------------

mke2fs -q -t ext4 -L gpuvm-root -E root_owner=0:0 -d "$root" "$work/root.img" "$DISK_SIZE" >&2 ||
	die "mke2fs -d failed"
qemu-img convert -q -c -O qcow2 -o compression_type=zstd "$work/root.img" "$work/desktop.qcow2" ||
	die "qemu-img convert failed"

install -m 0644 "$vmlinuz" "$cache/vmlinuz.new"
install -m 0644 "$initrd" "$cache/initrd.img.new"
install -m 0644 "$work/desktop.qcow2" "$cache/desktop.qcow2.new"
mv -f "$cache/vmlinuz.new" "$cache/vmlinuz"
mv -f "$cache/initrd.img.new" "$cache/initrd.img"
mv -f "$cache/desktop.qcow2.new" "$cache/desktop.qcow2"
echo "$stamp" >"$cache/stamp"
chmod 0755 "$cache"
log "built in $(($(date +%s) - start)) s: kernel $kver, image $(du -h "$cache/desktop.qcow2" | cut -f1) on disk ($DISK_SIZE virtual; tree $(du -sh "$root" | cut -f1))"
result
