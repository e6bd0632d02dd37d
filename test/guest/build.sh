#!/usr/bin/env bash
# build.sh: build gpuvm's tiny test guest from Debian packages only.
#
#   test/guest/build.sh            build (or reuse) $CACHE/vmlinuz and $CACHE/initrd.img
#   test/guest/build.sh --force    rebuild even when the cache is current
#
# The guest is the newest linux-image-*-cloud-amd64 kernel plus an initramfs of
# busybox-static whose /init (rootfs/init) mounts /proc, /sys and /dev, reads a
# cloud-init NoCloud seed from a CD-ROM labelled "cidata", prints
# "GPUVM-HOSTNAME=<local-hostname>" and "GPUVM-GUEST-READY" on the console, and
# powers off on an ACPI power-button press (busybox init + acpid). It makes an
# account for each user of the seed's user-data with its ssh_authorized_keys,
# starts dropbear (Debian's dropbear-bin, with the shared libraries it needs
# from Debian's packages) on port 22 and gets an address by DHCP on its
# virtio-net interface (busybox udhcpc; rootfs/sbin/gpuvm-net). Users get the
# uid the seed gives them; when the seed's vendor-data holds gpuvm's script
# that mounts the owner's home (gpuvm-home.sh), /init runs it: the home is
# mounted over virtiofs (fuse and virtiofs, modules or built in) and
# "GPUVM-HOME=<tag> on <path>" printed.
#
# Environment:
#   GPUVM_GUEST_CACHE        cache directory (default: test/guest/cache, git-ignored)
#   GPUVM_GUEST_KERNEL_PKG   kernel package to use instead of the newest one
#
# Idempotent: the build is skipped when $CACHE/stamp matches the chosen package
# versions (kernel, busybox-static, and dropbear-bin with its libraries) and the
# hash of this script and rootfs/. Concurrent runs serialise on
# $CACHE/.lock. Needs apt-get, apt-cache, dpkg, gzip and xz (or busybox's), and
# network access to the Debian mirror on the first build only. The last two
# lines on stdout are "kernel=<path>" and "initrd=<path>".
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${GPUVM_GUEST_CACHE:-$here/cache}
force=0
[ "${1:-}" = "--force" ] && force=1

log() { printf 'guest build: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
result() { printf 'kernel=%s\ninitrd=%s\n' "$cache/vmlinuz" "$cache/initrd.img"; }

# Modules the guest loads, by name; their dependencies are added (virtiofs
# needs fuse; Debian's cloud kernels build both in, and then nothing is added).
# virtio_blk reads data disks (test/e2e/disks_test.go); virtio_console gives
# a task's runner its channel, /dev/virtio-ports/org.gpuvm.task.0 (built in
# today's cloud kernels, a module in others).
MODULES=(button evdev ahci ata_piix sr_mod isofs virtio_net virtiofs virtio_blk virtio_console)

# Debian packages the SSH server comes from: dropbear-bin and every package
# holding a library it links (its Depends); the libraries are taken from
# these, not from the host, so that the stamp names all that goes in
# (libtomcrypt1 links libgmp10).
SSH_PKGS=(dropbear-bin libc6 libcrypt1 libgmp10 libtomcrypt1 libtommath1 zlib1g)
# The dropbear programs the guest runs.
SSH_BINS=(usr/sbin/dropbear usr/bin/dropbearkey usr/bin/dropbearconvert)

mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
exec 9>"$cache/.lock"
flock 9

# --- choose the packages --------------------------------------------------

# candidates prints "name version" for each named package that has a candidate.
candidates() {
	apt-cache policy "$@" 2>/dev/null | awk '
		/^[^ ].*:$/ { name = substr($0, 1, length($0) - 1) }
		/^  Candidate:/ { if ($2 != "(none)") print name, $2 }'
}

newest() { # reads "name version" lines, prints the line with the highest version
	local best="" bestv="" n v
	while read -r n v; do
		if [ -z "$best" ] || dpkg --compare-versions "$v" gt "$bestv"; then best=$n; bestv=$v; fi
	done
	[ -n "$best" ] && echo "$best $bestv"
}

kernel_pkg="" kernel_ver="" busybox_ver=""
# One apt-cache call (each costs about a second): every versioned cloud kernel
# (the linux-image-6.12-cloud-amd64 style metapackages hold no kernel; the
# -unsigned package holds the same kernel as its signed twin, and either boots)
# busybox-static and the SSH packages.
kpat='^linux-image-[0-9]+\.[0-9]+[.-][^ ]*-cloud-amd64(-unsigned)?$'
# apt matches an exact name before trying it as a pattern.
[ -n "${GPUVM_GUEST_KERNEL_PKG:-}" ] && kpat=$GPUVM_GUEST_KERNEL_PKG
others=(busybox-static "${SSH_PKGS[@]}")
policy=$(candidates "$kpat" "${others[@]}" | LC_ALL=C sort)
# A fresh machine may have empty apt lists: refresh them once, as root.
if ! grep -q '^busybox-static ' <<<"$policy" && [ "$(id -u)" -eq 0 ] && [ ! -s "$cache/vmlinuz" ]; then
	log "apt's lists know no busybox-static: running apt-get update"
	apt-get update -qq >&2 || log "apt-get update failed"
	policy=$(candidates "$kpat" "${others[@]}" | LC_ALL=C sort)
fi
read -r kernel_pkg kernel_ver < <(awk -v o=" ${others[*]} " 'index(o, " " $1 " ") == 0' <<<"$policy" | newest) || true
busybox_ver=$(awk '$1 == "busybox-static" {print $2}' <<<"$policy")
declare -A ssh_ver=()
missing_ssh=()
for p in "${SSH_PKGS[@]}"; do
	ssh_ver[$p]=$(awk -v p="$p" '$1 == p {print $2}' <<<"$policy")
	[ -n "${ssh_ver[$p]}" ] || missing_ssh+=("$p")
done
if [ -n "${GPUVM_GUEST_KERNEL_PKG:-}" ] && [ -z "$kernel_pkg" ]; then
	die "GPUVM_GUEST_KERNEL_PKG=$GPUVM_GUEST_KERNEL_PKG: no such package in apt's lists"
fi

script_hash=$( (cat "$here/build.sh"; cd "$here/rootfs" && find . -type f | LC_ALL=C sort | xargs -d '\n' sha256sum) | sha256sum | cut -c1-16)

if [ -z "$kernel_pkg" ] || [ -z "$busybox_ver" ] || [ ${#missing_ssh[@]} -gt 0 ]; then
	if [ -s "$cache/vmlinuz" ] && [ -s "$cache/initrd.img" ]; then
		log "apt knows no cloud kernel, busybox-static or ${SSH_PKGS[*]} (run apt-get update?); using the cached guest"
		result
		exit 0
	fi
	die "apt knows no linux-image-*-cloud-amd64, busybox-static or ${missing_ssh[*]:-${SSH_PKGS[*]}} package: run 'apt-get update'"
fi

ssh_stamp=""
for p in "${SSH_PKGS[@]}"; do ssh_stamp+=" $p=${ssh_ver[$p]}"; done
stamp="kernel=$kernel_pkg=$kernel_ver busybox-static=$busybox_ver$ssh_stamp script=$script_hash"
if [ $force -eq 0 ] && [ -s "$cache/vmlinuz" ] && [ -s "$cache/initrd.img" ] &&
	[ "$(cat "$cache/stamp" 2>/dev/null)" = "$stamp" ]; then
	result
	exit 0
fi
log "building: $stamp"

# --- fetch and unpack -----------------------------------------------------

debs="$cache/debs"
mkdir -p "$debs"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

fetch() { # fetch PKG VERSION: prints the .deb path
	local pkg=$1 ver=$2 f
	f=$(find "$debs" -maxdepth 1 -name "${pkg}_*.deb" -print | while read -r d; do
		[ "$(dpkg-deb -f "$d" Version)" = "$ver" ] && echo "$d"
	done | head -n 1)
	if [ -z "$f" ]; then
		find "$debs" -maxdepth 1 -name "${pkg}_*.deb" -delete
		local opts=()
		# As root, apt drops to _apt, which may not write here; it then warns. Stay root.
		[ "$(id -u)" -eq 0 ] && opts=(-o APT::Sandbox::User=root)
		(cd "$debs" && apt-get download -q "${opts[@]}" "$pkg=$ver" >&2) ||
			die "apt-get download $pkg=$ver failed"
		f=$(find "$debs" -maxdepth 1 -name "${pkg}_*.deb" -print | head -n 1)
	fi
	[ -n "$f" ] || die "no .deb for $pkg after download"
	echo "$f"
}

kdeb=$(fetch "$kernel_pkg" "$kernel_ver")
bdeb=$(fetch busybox-static "$busybox_ver")
keep=(! -path "$kdeb" ! -path "$bdeb")
for p in "${SSH_PKGS[@]}"; do
	d=$(fetch "$p" "${ssh_ver[$p]}")
	dpkg -x "$d" "$work/ssh"
	keep+=(! -path "$d")
done
# Keep only the packages in use.
find "$debs" -maxdepth 1 -name '*.deb' "${keep[@]}" -delete
dpkg -x "$kdeb" "$work/k"
dpkg -x "$bdeb" "$work/bb"

vmlinuz=$(find "$work/k/boot" -maxdepth 1 -name 'vmlinuz-*' -print 2>/dev/null | head -n 1 || true)
[ -n "$vmlinuz" ] || die "$kernel_pkg holds no /boot/vmlinuz-*"
kver=${vmlinuz##*/vmlinuz-}
moddir="$work/k/lib/modules/$kver"
[ -d "$moddir" ] || die "$kernel_pkg holds no /lib/modules/$kver"
bb="$work/bb/bin/busybox"
[ -x "$bb" ] || die "busybox-static holds no /bin/busybox"

# --- the root file system -------------------------------------------------

root="$work/root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,run,tmp,mnt,lib/modules,var/log,var/run}
cp "$bb" "$root/bin/busybox"
"$bb" --list-full | while read -r applet; do
	[ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
done
cp -R "$here/rootfs/." "$root/"
chmod 0755 "$root/init" "$root/etc/acpi/PWRF/00000080" "$root/sbin/gpuvm-net" "$root/etc/udhcpc/default.script" "$root/bin/mountpoint"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/shells" "$root/etc/nsswitch.conf" "$root/etc/gpuvm/users.awk" "$root/etc/gpuvm/hostkey.awk" \
	"$root/etc/gpuvm/vendorpart.awk"

# The SSH server: dropbear's programs, and the shared libraries ldd names for
# them, found in the SSH packages (never the host's), at the paths the
# packages give them; the dynamic loader at its ABI path too.
ssh="$work/ssh"
libpath=""
for d in lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu lib64; do
	[ -d "$ssh/$d" ] && libpath+="${libpath:+:}$ssh/$d"
done
# from_pkgs SONAME: the path of SONAME in the SSH packages.
from_pkgs() {
	local d
	for d in lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu lib64; do
		[ -e "$ssh/$d/$1" ] && { echo "$d/$1"; return 0; }
	done
	return 1
}
declare -A libs=()
for b in "${SSH_BINS[@]}"; do
	[ -x "$ssh/$b" ] || die "dropbear-bin holds no /$b"
	install -D -m 0755 "$ssh/$b" "$root/$b"
	# ldd prints "libz.so.1 => /path (0x…)" and the loader as "/lib64/ld-linux-x86-64.so.2 (0x…)".
	out=$(LD_LIBRARY_PATH=$libpath ldd "$ssh/$b") || die "ldd $b failed: $out"
	while read -r name; do
		[ -n "$name" ] && libs[$name]=1
	done < <(awk '$2 == "=>" && $1 !~ /^linux-vdso/ {print $1} $1 ~ /^\// {n = split($1, p, "/"); print p[n]}' <<<"$out")
	if grep -q 'not found' <<<"$out"; then die "$b needs a library none of ${SSH_PKGS[*]} holds: $out"; fi
done
for name in "${!libs[@]}"; do
	rel=$(from_pkgs "$name") || die "no package of ${SSH_PKGS[*]} holds $name, which dropbear needs"
	install -D -m 0755 "$(readlink -f "$ssh/$rel")" "$root/$rel"
done
ld=$(from_pkgs ld-linux-x86-64.so.2) || die "libc6 holds no ld-linux-x86-64.so.2"
mkdir -p "$root/lib64"
[ -e "$root/lib64/ld-linux-x86-64.so.2" ] || ln -s "/$ld" "$root/lib64/ld-linux-x86-64.so.2"

# decompress SRC DST: kernel modules are .ko, .ko.xz, .ko.gz or .ko.zst.
decompress() {
	case $1 in
	*.xz) if command -v xz >/dev/null; then xz -dc "$1"; else "$bb" xzcat "$1"; fi >"$2" ;;
	*.gz) gzip -dc "$1" >"$2" ;;
	*.zst) zstd -qdc "$1" >"$2" ;;
	*) cp "$1" "$2" ;;
	esac
}

declare -A loaded=()
order=()
# add_module NAME: NAME after everything it depends on ("depends=" in .modinfo).
add_module() {
	local name=$1 src dep deps
	[ -n "${loaded[$name]:-}" ] && return 0
	loaded[$name]=1
	src=$(find "$moddir/kernel" \( -name "$name.ko" -o -name "$name.ko.*" \) -print | head -n 1)
	if [ -z "$src" ]; then
		# Hyphens and underscores are the same in module names.
		src=$(find "$moddir/kernel" \( -name "${name//_/-}.ko" -o -name "${name//_/-}.ko.*" \) -print | head -n 1)
	fi
	if [ -z "$src" ]; then
		if grep -qE "/(${name}|${name//_/-})\.ko$" "$moddir/modules.builtin" 2>/dev/null; then return 0; fi
		die "kernel module $name not found in $kernel_pkg"
	fi
	decompress "$src" "$work/$name.ko"
	deps=$(tr '\0' '\n' <"$work/$name.ko" | sed -n 's/^depends=//p' | head -n 1)
	for dep in ${deps//,/ }; do add_module "$dep"; done
	mv "$work/$name.ko" "$root/lib/modules/$name.ko"
	order+=("$name.ko")
}
for m in "${MODULES[@]}"; do add_module "$m"; done
printf '%s\n' "${order[@]}" >"$root/etc/modules.load"
echo "$stamp" >"$root/etc/gpuvm-guest"

# --- pack -----------------------------------------------------------------

# GNU cpio when installed, else busybox's own (both write newc).
if command -v cpio >/dev/null; then cpio_cmd=(cpio --quiet); else cpio_cmd=("$bb" cpio); fi
(cd "$root" && find . -print | LC_ALL=C sort | "${cpio_cmd[@]}" -o -H newc -R 0:0) | gzip -9n >"$work/initrd.img"
[ -s "$work/initrd.img" ] || die "empty initramfs"

install -m 0644 "$vmlinuz" "$cache/vmlinuz.new"
install -m 0644 "$work/initrd.img" "$cache/initrd.img.new"
mv -f "$cache/vmlinuz.new" "$cache/vmlinuz"
mv -f "$cache/initrd.img.new" "$cache/initrd.img"
echo "$stamp" >"$cache/stamp"
chmod 0755 "$cache"
log "kernel $kver ($(du -h "$cache/vmlinuz" | cut -f1)), initramfs $(du -h "$cache/initrd.img" | cut -f1), modules: ${order[*]}, libraries: ${!libs[*]}"
result
