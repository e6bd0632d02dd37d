// Package guest builds and locates gpuvm's tiny test guest: a Debian cloud
// kernel and a busybox initramfs (build.sh beside this file) that boots in
// seconds under software emulation, prints what it read from a cloud-init
// NoCloud seed on its serial console, and powers off on an ACPI power-button
// press. On a network (virtio-net, e.g. libvirt's NAT network "default") it
// gets an address by DHCP, sending its hostname, and serves SSH on port 22
// (Debian's dropbear, keys only): an account for each user of the seed's
// user-data, with its ssh_authorized_keys, its uid (when the user-data
// gives one), a home and /bin/sh; its host key
// is the ed25519 key of the seed's vendor-data (cloud-init's ssh_keys, which
// gpuvm writes), else one made at boot. When the vendor-data holds gpuvm's
// script that mounts the owner's home (gpuvm-home.sh), the guest runs it:
// the home is mounted over virtiofs.
//
// The guest prints these lines on the serial console (console=ttyS0):
//
//	GPUVM-HOSTNAME=<local-hostname>   when a "cidata" CD-ROM holds meta-data
//	GPUVM-INSTANCE-ID=<instance-id>   likewise
//	GPUVM-SEED=none                   when there is no seed
//	GPUVM-USER=<name>                 for each account made from user-data
//	GPUVM-HOME=<tag> on <path>        the home's virtiofs mount, when vendor-data has its script
//	GPUVM-HOME=not mounted            when the script did not mount it
//	GPUVM-SHARE=<tag> on <path>       each share's virtiofs mount, when vendor-data has gpuvm-shares.sh
//	GPUVM-GUEST-READY                 once booted and listening for ACPI events
//	GPUVM-SSH-HOSTKEY=SHA256:…        the SSH host key's fingerprint
//	GPUVM-SSH-HOSTKEY-FROM=seed|made  the seed's key (vendor-data's ssh_keys), or one made at boot
//	GPUVM-SSH=listening on port 22    once dropbear runs
//	GPUVM-ADDRESS=<ip>/<len> on eth0  once DHCP gave an address
//	GPUVM-NET=none                    when there is no network interface
//	GPUVM-GUEST-POWERBUTTON           on an ACPI power-button press
//	GPUVM-GUEST-SHUTDOWN              as it powers off
package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gpuvm/gpuvm/test/testbin"
)

// Lines the guest prints on its serial console.
const (
	ReadyMarker    = "GPUVM-GUEST-READY"
	UserPrefix     = "GPUVM-USER="
	HomePrefix     = "GPUVM-HOME="
	SSHMarker      = "GPUVM-SSH=listening on port 22"
	AddressPrefix  = "GPUVM-ADDRESS="
	NoNetMarker    = "GPUVM-NET=none"
	HostnamePrefix = "GPUVM-HOSTNAME="
	InstancePrefix = "GPUVM-INSTANCE-ID="
	NoSeedMarker   = "GPUVM-SEED=none"
	PowerButton    = "GPUVM-GUEST-POWERBUTTON"
	ShutdownMarker = "GPUVM-GUEST-SHUTDOWN"
)

// Cmdline is the kernel command line the guest is meant to boot with: the
// console on the first serial port, and a reboot rather than a hang on panic.
const Cmdline = "console=ttyS0 panic=-1"

// CacheEnv names the environment variable that moves the cache directory.
const CacheEnv = "GPUVM_GUEST_CACHE"

// Dir is the directory holding build.sh: this source file's directory.
func Dir() string {
	return filepath.Join(testbin.Root(), "test", "guest")
}

// CacheDir is where the guest is built: $GPUVM_GUEST_CACHE, or cache/ beside
// build.sh.
func CacheDir() string {
	if d := os.Getenv(CacheEnv); d != "" {
		return d
	}
	return filepath.Join(Dir(), "cache")
}

var (
	mu             sync.Mutex
	kernel, initrd string
)

// Ensure builds the guest unless the cache is current (build.sh decides, in
// about a second when there is nothing to do) and returns the paths of its
// kernel and initramfs. The first build downloads nine Debian packages (about
// 39 MB: the kernel, busybox-static, dropbear-bin and its libraries). Within one process, later calls return the first answer.
func Ensure(ctx context.Context) (kernelPath, initrdPath string, err error) {
	mu.Lock()
	defer mu.Unlock()
	if kernel != "" {
		return kernel, initrd, nil
	}
	script := filepath.Join(Dir(), "build.sh")
	if _, err := os.Stat(script); err != nil {
		return "", "", fmt.Errorf("tiny guest: build script: %w", err)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		if k, i, ok := cached(); ok {
			return k, i, nil
		}
		return "", "", fmt.Errorf("tiny guest: not built in %s and apt-get is missing: it is built from Debian packages", CacheDir())
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), CacheEnv+"="+CacheDir())
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = errors.Join(ctx.Err(), err)
		}
		return "", "", fmt.Errorf("tiny guest: %s: %w\n%s", script, err, tail(stderr.String(), 2000))
	}
	k, i, err := parseResult(stdout.String())
	if err != nil {
		return "", "", fmt.Errorf("tiny guest: %s: %w\n%s", script, err, tail(stderr.String(), 2000))
	}
	for _, p := range []string{k, i} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			return "", "", fmt.Errorf("tiny guest: %s reported %s, which is missing or empty", script, p)
		}
	}
	kernel, initrd = k, i
	return kernel, initrd, nil
}

// cached reports an existing build when build.sh cannot run.
func cached() (k, i string, ok bool) {
	k = filepath.Join(CacheDir(), "vmlinuz")
	i = filepath.Join(CacheDir(), "initrd.img")
	for _, p := range []string{k, i} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			return "", "", false
		}
	}
	return k, i, true
}

// parseResult reads build.sh's last lines, "kernel=<path>" and "initrd=<path>".
func parseResult(out string) (k, i string, err error) {
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimRight(line, "\r")
		switch {
		case strings.HasPrefix(line, "kernel="):
			k = strings.TrimPrefix(line, "kernel=")
		case strings.HasPrefix(line, "initrd="):
			i = strings.TrimPrefix(line, "initrd=")
		}
	}
	if k == "" || i == "" {
		return "", "", fmt.Errorf("unexpected output %q: want the lines kernel=PATH and initrd=PATH", tail(out, 300))
	}
	return k, i, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
