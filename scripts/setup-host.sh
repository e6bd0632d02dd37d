#!/usr/bin/env bash
# setup-host.sh: make this machine ready to build, test and run gpuvm.
# Idempotent; needs root (or sudo) for package installs. Safe to run on every `make`.
set -euo pipefail

log() { printf 'setup-host: %s\n' "$*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
		log "not root and no sudo: skipping package installs and daemons"; exit 0
	fi
fi

# Debian packages gpuvm needs to build (libvirt-dev, protoc), test (libvirtd, QEMU,
# xmllint, PostgreSQL, Chromium and a Chinese font for it) and boot its tiny test guest (cpio, genisoimage-free: we make
# ISO images in Go) on libvirt's NAT network "default" (dnsmasq-base serves its DHCP), and
# reach it with `gpuvm ssh` (the OpenSSH client).
PKGS=(
	pkg-config gcc libvirt-dev libvirt-daemon-system libvirt-clients
	qemu-system-x86 qemu-utils libxml2-utils protobuf-compiler
	postgresql
	chromium # headless, for the browser console test (noVNC) and the portal's browser tests
	fonts-wqy-microhei # a font for Simplified Chinese (1.6 MB), without which Chromium draws the portal's zh-CN pages as empty boxes
	dnsmasq-base openssh-client
	ovmf swtpm swtpm-tools # UEFI with Secure Boot and TPM 2.0: the Windows install VM's tests
)
missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# Without systemd, package scripts must not try to start services.
	if [ ! -d /run/systemd/system ] && [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
		$SUDO chmod +x /usr/sbin/policy-rc.d
		trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Start virtlogd and libvirtd when no init system does it for us.
if [ ! -d /run/systemd/system ]; then
	if ! pgrep -x virtlogd >/dev/null 2>&1; then log "starting virtlogd"; $SUDO virtlogd -d; fi
	if ! pgrep -x libvirtd >/dev/null 2>&1; then log "starting libvirtd"; $SUDO libvirtd -d; fi
	for _ in $(seq 1 50); do
		[ -S /var/run/libvirt/libvirt-sock ] && break
		sleep 0.2
	done
fi

# libvirt's NAT network "default" (192.168.122.0/24, DHCP by dnsmasq), which the tiny
# guest's profiles use: defined from libvirt's own default.xml when missing, started, and
# marked autostart (libvirtd starts it next time).
ensure_default_network() {
	local virsh=($SUDO virsh -q -c qemu:///system) xml=/usr/share/libvirt/networks/default.xml
	"${virsh[@]}" uri >/dev/null 2>&1 || { log "libvirtd does not answer: network \"default\" not checked"; return 0; }
	if ! "${virsh[@]}" net-info default >/dev/null 2>&1; then
		if [ ! -r "$xml" ]; then log "libvirt network \"default\" is missing and $xml too: guests get no network"; return 0; fi
		log "defining libvirt network \"default\" from $xml"
		"${virsh[@]}" net-define "$xml" >/dev/null || { log "cannot define network \"default\""; return 0; }
	fi
	local info
	info=$("${virsh[@]}" net-info default 2>/dev/null || true)
	if ! grep -Eq '^Active: +yes' <<<"$info"; then
		log "starting libvirt network \"default\""
		"${virsh[@]}" net-start default >/dev/null || log "cannot start network \"default\": guests on it will not start"
	fi
	if ! grep -Eq '^Autostart: +yes' <<<"$info"; then
		"${virsh[@]}" net-autostart default >/dev/null || log "cannot mark network \"default\" autostart"
	fi
}
ensure_default_network

# Make /dev/kvm usable by the user QEMU runs as (libvirt-qemu, group kvm).
if [ -e /dev/kvm ]; then
	getent group kvm >/dev/null 2>&1 || $SUDO groupadd -r kvm
	$SUDO chgrp kvm /dev/kvm
	$SUDO chmod 660 /dev/kvm
fi
# The desktop guest and its system test (test/guest/desktop, test/e2e's
# TestDesktopOverRDP): mmdebstrap and e2fsprogs build the image; FreeRDP,
# Xvfb and xwd (x11-apps) reach its desktop and take the screenshot.
DESKTOP_PKGS=(mmdebstrap e2fsprogs freerdp2-x11 xvfb x11-apps)
missing=()
for p in "${DESKTOP_PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]} (the desktop guest and its RDP test)"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# OpenLDAP's slapd and its tools, for the LDAP sign-in tests (pkg/auth/ldap/ldaptest starts
# its own slapd in a temporary directory). Preseeded to configure no directory of the
# machine's own, so the package neither asks nor serves anything.
ldap_missing=()
for p in slapd ldap-utils; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || ldap_missing+=("$p")
done
if [ ${#ldap_missing[@]} -gt 0 ]; then
	log "installing ${ldap_missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	echo "slapd slapd/no_configuration boolean true" | $SUDO debconf-set-selections
	if [ ! -d /run/systemd/system ] && [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
		$SUDO chmod +x /usr/sbin/policy-rc.d
		trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	$SUDO apt-get install -y -qq --no-install-recommends "${ldap_missing[@]}" >/dev/null ||
		{ $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${ldap_missing[@]}" >/dev/null; }
fi
log "ready"
