#!/usr/bin/env bash
# test/install/run.sh PKGDIR — installs the gpuvm .deb of PKGDIR into a
# Debian bookworm root made with mmdebstrap and checks it there: apt-get
# resolves its dependencies, gpuvm and gpuvmd run and say their version,
# the /etc/gpuvm skeleton validates (and so does every example commented out
# in it), and systemd-analyze verify accepts the units; then an upgrade over
# a running gpuvmd's database, and a downgrade over a newer schema, refused.
#
# The root is cached by content in $GPUVM_INSTALL_CACHE (/var/cache/gpuvm):
# a tarball keyed by a hash of the suite, the mirror and the package list,
# which is the package's own Depends plus systemd. A fresh machine pays one
# mmdebstrap (~80 s here, downloading libvirt, QEMU and their dependencies;
# a 390 MB tarball is kept);
# later runs unpack the tarball (the whole test then takes ~20 s, after the
# ~40 s of make package with a warm Go build cache).
#
# Skips (exit 0, saying why) when not root or without mmdebstrap.
#
# test/install/run.sh --root makes (or finds) only the cached root, of the
# Depends packaging/nfpm.yaml gives the package, without a package: make
# test runs it in the background while the other tests run. Both serialise
# on the cache's lock.
set -euo pipefail
pkgdir=${1:?usage: run.sh PKGDIR | run.sh --root}
start=$(date +%s)
skip() { echo "test-install: SKIP: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root (mmdebstrap and chroot)"
command -v mmdebstrap >/dev/null || skip "mmdebstrap is not installed (apt-get install mmdebstrap)"

suite=bookworm
mirror=${GPUVM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ "$pkgdir" = --root ]; then
	# nfpm.yaml's depends list: the lines "  - NAME" after "depends:".
	deps=$(awk '/^[a-z_]+:/ { in_deps = ($1 == "depends:"); next } in_deps && /^ *- / { print $2 }' \
		"$(dirname "$0")/../../packaging/nfpm.yaml" | sort -u | tr '\n' ' ')
	[ -n "$deps" ] || { echo "test-install: no depends in packaging/nfpm.yaml"; exit 1; }
else
	deb=$(ls -t "$pkgdir"/gpuvm_*_amd64.deb 2>/dev/null | head -1)
	[ -n "$deb" ] || { echo "test-install: no gpuvm_*_amd64.deb in $pkgdir (make package)"; exit 1; }
	# The package's Depends, alternatives and versions dropped: if a name is not
	# in the suite, mmdebstrap fails here and says which.
	deps=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -E 's/[|(].*//; s/ //g' | grep -v '^$' | sort -u | tr '\n' ' ')
fi
include="systemd $deps"
key=$(printf '%s\n' "$suite" "$mirror" $include | sha256sum | cut -c1-16)
cache=${GPUVM_INSTALL_CACHE:-/var/cache/gpuvm}/install-root-$suite-$key.tar
mkdir -p "$(dirname "$cache")"
exec 9>"$(dirname "$cache")/install-root.lock"
flock 9
if [ ! -s "$cache" ]; then
	echo "test-install: making the $suite root with: $include (cached as $cache)"
	t0=$(date +%s)
	mmdebstrap --quiet --format=tar --variant=apt --include="${include// /,}" "$suite" "$cache.tmp" "$mirror"
	mv "$cache.tmp" "$cache"
	# Roots of other package lists are stale: one root is kept.
	find "$(dirname "$cache")" -maxdepth 1 -name "install-root-$suite-*.tar" ! -name "$(basename "$cache")" -delete
	echo "test-install: root made in $(($(date +%s) - t0)) s"
fi
exec 9>&-
if [ "$pkgdir" = --root ]; then
	echo "test-install: the $suite root is $cache"
	exit 0
fi

root=$(mktemp -d /tmp/gpuvm-install-root.XXXXXX)
cleanup() {
	for m in dev/pts dev proc sys; do umount -l "$root/$m" 2>/dev/null || true; done
	rm -rf --one-file-system "$root"
}
trap cleanup EXIT
tar -C "$root" -xf "$cache"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }

cp "$deb" "$root/tmp/"
# The dependencies are in the root already; apt still resolves the package
# against them (and would fetch anything missing, which fails offline).
in_root apt-get install -y -q --no-install-recommends "/tmp/$(basename "$deb")" >"$root/tmp/apt.log" 2>&1 ||
	{ cat "$root/tmp/apt.log"; echo "test-install: FAIL: apt-get install"; exit 1; }

fail=0
check() { # NAME CMD...: runs CMD, prints its output on failure
	local name=$1
	shift
	if out=$("$@" 2>&1); then
		echo "test-install: ok   $name${out:+: $(head -1 <<<"$out")}"
	else
		echo "test-install: FAIL $name"
		sed 's/^/    /' <<<"$out"
		fail=1
	fi
}
version=$(dpkg-deb -f "$deb" Version)
check "gpuvm --version" bash -c "chroot '$root' gpuvm --version | grep -F -- '$version'"
check "gpuvmd --version" bash -c "chroot '$root' gpuvmd --version | grep -F -- '$version'"
check "gpuvm config validate /etc/gpuvm" in_root gpuvm config validate /etc/gpuvm
# Every example in the skeleton, uncommented, validates too.
mkdir -p "$root/tmp/uncommented"
for f in "$root"/etc/gpuvm/*.hcl; do
	sed -E 's/^(\s*)# ( *)(\}|[a-z_]+ +=.*|[a-z_]+( +"[^"]*")? *\{)$/\1\2\3/' "$f" >"$root/tmp/uncommented/$(basename "$f")"
done
check "the skeleton's examples, uncommented, validate" in_root gpuvm config validate /tmp/uncommented
check "/var/lib/gpuvm is 0750" bash -c "[ \"\$(stat -c %a '$root/var/lib/gpuvm')\" = 750 ]"
check "plugins in /usr/lib/gpuvm/plugins" bash -c "ls '$root'/usr/lib/gpuvm/plugins/gpuvm-backend-{vgpu,mig,passthrough} >/dev/null"
check "units enabled, not started" bash -c "[ -L '$root/etc/systemd/system/multi-user.target.wants/gpuvmd.service' ] && [ -L '$root/etc/systemd/system/multi-user.target.wants/gpuvm-host-prep.service' ]"
check "conffiles" bash -c "chroot '$root' dpkg-query -W -f='\${Conffiles}' gpuvm | grep -c /etc/gpuvm/ | grep -qx 3"
check "man pages" bash -c "[ -s '$root/usr/share/man/man1/gpuvm.1.gz' ] && [ -s '$root/usr/share/man/man8/gpuvmd.8.gz' ]"
# --man=no: the root has no man-db to look Documentation= up with.
check "systemd-analyze verify" in_root systemd-analyze verify --man=no /usr/lib/systemd/system/gpuvmd.service /usr/lib/systemd/system/gpuvm-host-prep.service
# An upgrade over a running gpuvmd (on the simulator and libvirt's test
# driver; the root runs no systemd, so the test stops and starts it where
# the maintainer scripts would): the database, the admin's edit of a
# conffile and the units' enablement survive, and the new gpuvmd opens the
# old database (same installation).
port=$((20000 + RANDOM % 20000))
start_gpuvmd() { # LOG
	chroot "$root" env -i PATH=/usr/sbin:/usr/bin GPUVM_CONFIG=/etc/gpuvm gpuvmd --simulate a40x2 --libvirt-uri test:///default \
		--nvml none --listen "127.0.0.1:$port" >"$root/tmp/$1" 2>&1 &
	gpuvmd_pid=$!
	for _ in $(seq 100); do
		curl -fsS "http://127.0.0.1:$port/healthz" >"$root/tmp/$1.healthz" 2>/dev/null && return 0
		sleep 0.2
	done
	return 1
}
stop_gpuvmd() { kill "$gpuvmd_pid" 2>/dev/null && wait "$gpuvmd_pid" 2>/dev/null || true; }
installation() { sed -n 's/.*msg=installation id=\([^ ]*\).*/\1/p' "$root/tmp/$1" | head -1; }
start_gpuvmd before.log || { echo "test-install: gpuvmd did not serve:"; cat "$root/tmp/before.log"; }
check "gpuvmd serves, /healthz says $version" grep -F "\"version\":\"$version\"" "$root/tmp/before.log.healthz"
echo "# the admin's own line" >>"$root/etc/gpuvm/server.hcl"
stop_gpuvmd
upgrade=$root/tmp/upgrade
dpkg-deb -R "$deb" "$upgrade"
sed -i "s/^Version: .*/Version: $version+upgrade1/" "$upgrade/DEBIAN/control"
dpkg-deb -Znone -b "$upgrade" "$root/tmp/gpuvm-upgrade.deb" >/dev/null
rm -rf "$upgrade"
check "apt-get install of a newer version" in_root apt-get install -y -q --no-install-recommends /tmp/gpuvm-upgrade.deb
check "the admin's conffile edit kept" grep -q "the admin's own line" "$root/etc/gpuvm/server.hcl"
check "units still enabled" test -L "$root/etc/systemd/system/multi-user.target.wants/gpuvmd.service"
check "the database kept" test -s "$root/var/lib/gpuvm/gpuvm.db"
start_gpuvmd after.log || { echo "test-install: gpuvmd did not serve after the upgrade:"; cat "$root/tmp/after.log"; }
stop_gpuvmd
before=$(installation before.log) after=$(installation after.log)
check "the new gpuvmd opens the old database (installation ${before:-?} -> ${after:-?})" test -n "$before" -a "$before" = "$after"

# A downgrade over a newer schema: a package whose gpuvmd knows one schema
# version less than the database's (made from this one: its version lowered,
# its preinst told the lower schema) is refused by its preinst, naming both
# versions, and the installed gpuvm stays as it was.
check "gpuvmd recorded the database's schema version" test -s "$root/var/lib/gpuvm/schema-version"
dbschema=$(tr -cd 0-9 <"$root/var/lib/gpuvm/schema-version")
older=$root/tmp/older
dpkg-deb -R "$deb" "$older"
sed -i "s/^Version: .*/Version: $version~older1/" "$older/DEBIAN/control"
sed -i -e "s/^known=[0-9]*/known=$((dbschema - 1))/" -e "s/^version=.*/version=$version~older1/" "$older/DEBIAN/preinst"
dpkg-deb -Znone -b "$older" "$root/tmp/gpuvm-older.deb" >/dev/null
rm -rf "$older"
check "a downgrade over schema $dbschema is refused" bash -c "! chroot '$root' env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin apt-get install -y -q --allow-downgrades --no-install-recommends /tmp/gpuvm-older.deb >'$root/tmp/older.log' 2>&1"
check "the refusal names both schema versions" bash -c "grep -F 'refusing to install gpuvm $version~older1: the database is at schema version $dbschema' '$root/tmp/older.log' && grep -F 'up to $((dbschema - 1)) only' '$root/tmp/older.log'"
check "the newer gpuvm stays installed" bash -c "[ \"\$(chroot '$root' dpkg-query -W -f='\${Version} \${Status}' gpuvm)\" = '$version+upgrade1 install ok installed' ]"

check "apt-get remove" in_root apt-get remove -y -q gpuvm
check "units disabled after remove" bash -c "[ ! -e '$root/etc/systemd/system/multi-user.target.wants/gpuvmd.service' ]"

echo "test-install: $( ((fail)) && echo FAIL || echo PASS ) in $(($(date +%s) - start)) s"
exit $fail
