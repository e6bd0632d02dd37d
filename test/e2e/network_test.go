package e2e

import (
	"bufio"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/test/guest"
)

// netProfiles are configs/dev's tiny-mig on libvirt's NAT network "default"
// with its cloud-init template, and a VM on no network at all that boots
// from a blank disk (SeaBIOS finds nothing to boot and waits, nearly idle:
// the test boots one guest, not two). KERNEL, INITRD, CMDLINE and BLANK are
// filled in.
const netProfiles = `
image "blank" {
  path     = "BLANK"
  format   = "raw"
  firmware = "bios"
}

template "tiny-seed" {
  content = <<EOT
#cloud-config
hostname: ${hostname}
users:
  - name: ${user}
    ssh_authorized_keys:
%{ for key in ssh_authorized_keys ~}
      - ${key}
%{ endfor ~}
EOT
}

profile "tiny-mig" {
  vcpus  = 1
  memory = "512MiB"
  boot {
    kernel  = "KERNEL"
    initrd  = "INITRD"
    cmdline = "CMDLINE"
  }
  network {
    type   = "network"
    source = "default"
  }
  cloud_init { template = "tiny-seed" }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }
}

profile "offline" {
  vcpus   = 1
  memory  = "128MiB"
  disk { image = "blank" }
  network { type = "none" }
  cloud_init { template = "tiny-seed" }
}
`

// netBootTimeout is gpuvmd's --boot-timeout in TestTinyGuestOnNetwork:
// long enough for the networked guest to get its address first on a busy
// machine (25-40 s on 2 shared cores), short enough to see the offline VM
// made ready by it: it bounds the test's time.
const netBootTimeout = 75 * time.Second

// needDefaultNetwork skips the test unless libvirt's network "default" is
// active.
func needDefaultNetwork(t *testing.T) {
	t.Helper()
	out, err := exec.Command("virsh", "-q", "-c", systemURI, "net-info", "default").CombinedOutput()
	if err != nil {
		t.Skipf("libvirt's NAT network \"default\" is missing (scripts/setup-host.sh defines and starts it): virsh net-info default: %v %s", err, strings.TrimSpace(string(out)))
	}
	if !regexp.MustCompile(`(?m)^Active:\s+yes`).Match(out) {
		t.Skip("libvirt's NAT network \"default\" is not active (scripts/setup-host.sh starts it; or: virsh net-start default)")
	}
}

// The tiny guest on libvirt's NAT network, asked for over the API of a
// gpuvmd on a simulated h100x8 host, as `make run` does: it is ready once
// it has an address from the network's DHCP, with that address;
// `gpuvm ssh VM -- cat /etc/hostname` (the CLI and the system's OpenSSH
// client, through gpuvmd's tunnel, as the VM's owner with the key given at
// create time) prints the VM's name; `gpuvm tunnel VM 22` carries SSH from
// another process. Faults: a tunnel to a port the guest does not listen on
// fails at once and says why, and so does one to a guest without an
// address; a guest on no network is ready when the boot timeout passes,
// and its reason says so. As root, with qemu:///system and the network
// "default"; not with -short or GPUVM_SKIP_SYSTEM_TEST=1.
func TestTinyGuestOnNetwork(t *testing.T) {
	hv := needSystemLibvirt(t)
	for _, tool := range []string{"ssh", "ssh-keygen", "virsh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing (scripts/setup-host.sh installs openssh-client and libvirt-clients): %v", tool, err)
		}
	}
	needDefaultNetwork(t)
	tiny := setUpTinyGuest(t, hv)
	blank := filepath.Join(filepath.Dir(tiny.files[tiny.kernel]), "blank.raw") // setUpTinyGuest made it
	profiles := strings.NewReplacer("KERNEL", tiny.files[tiny.kernel], "INITRD", tiny.files[tiny.initrd],
		"CMDLINE", guest.Cmdline, "BLANK", blank).Replace(netProfiles)
	w := newWorld(t, worldConfig{preset: "h100x8", uri: systemURI, pool: tiny.pool, profiles: profiles,
		args: []string{"--boot-timeout", netBootTimeout.String()}})
	w.start()
	hostBefore, lvBefore := w.simHost(), w.libvirtState(hv)

	key, pub := sshKeyPair(t) // homes_test.go

	// The offline guest first: its boot timeout runs while the other boots.
	begin := time.Now()
	offline := w.create("offline", "offline")
	resp, err := w.cl.CreateVM(w.ctx(30*time.Second), api.CreateVMRequest{Profile: "tiny-mig", Name: "net-1",
		SSHKeys: []string{pub}}, "")
	if err != nil {
		t.Fatal(err)
	}
	netBegin := time.Now()
	vm := w.waitReady(resp.VM.ID, 3*time.Minute)
	toReady := time.Since(netBegin)
	if vm.Reason != "" || len(vm.Addresses) == 0 {
		t.Fatalf("VM %s is ready after %v with reason %q and addresses %+v: want the guest's DHCP address", vm.Name, toReady, vm.Reason, vm.Addresses)
	}
	if a := vm.Addresses[0]; a.Source != "lease" || !netip.MustParseAddr(a.IP).Is4() || a.Prefix != 24 {
		t.Errorf("address %+v: want an IPv4 /24 from the network's DHCP leases", a)
	}

	// gpuvm ssh: the real CLI and the system's ssh, through gpuvmd.
	bin := gpuvmCLI(t)
	c := cliRun{t: t, bin: bin, home: t.TempDir()}
	token, err := os.ReadFile(filepath.Join(w.state, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := c.run(string(token), "login", w.proc.URL()); code != 0 {
		t.Fatalf("login: exit %d %s %s", code, out, errOut)
	}
	// The guest's host key is the one gpuvmd made for its seed: gpuvm ssh
	// verifies it on the first connection, asking nothing (BatchMode
	// would fail a question), with no host key option of the test's own:
	// only the identity (the test's key, not the user's ~/.ssh).
	if len(vm.SSHHostKeys) != 1 || !strings.HasPrefix(vm.SSHHostKeys[0], "ssh-ed25519 ") {
		t.Fatalf("VM %s shows ssh_host_keys %q: want the ed25519 key gpuvmd made for its seed", vm.Name, vm.SSHHostKeys)
	}
	idOpts := []string{"-F", "/dev/null", "-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30"}
	sshBegin := time.Now()
	if out, errOut, code := c.run("", append(append([]string{"ssh", "net-1", "--"}, idOpts...), "true")...); code != 0 {
		t.Fatalf("gpuvm ssh net-1 -- true (the first connection): exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	sshTook := time.Since(sshBegin)
	known := filepath.Join(c.home, ".config", "gpuvm", "known_hosts", vm.ID)
	keyFields := strings.Fields(vm.SSHHostKeys[0])
	if kh, _ := os.ReadFile(known); string(kh) != "gpuvm-"+vm.ID+" "+keyFields[0]+" "+keyFields[1]+"\n" {
		t.Errorf("%s holds %q: want the VM's host key under its alias", known, kh)
	}
	out, errOut, code := c.run("", append(append([]string{"ssh", "net-1", "--"}, idOpts...), "cat", "/etc/hostname")...)
	if code != 0 || strings.TrimSpace(out) != "net-1" {
		t.Fatalf("gpuvm ssh net-1 -- cat /etc/hostname: exit %d, printed %q (want the VM's name)\nstderr: %s", code, out, errOut)
	}
	// ssh through the tunnel below checks the same key, by the same alias.
	sshOpts := append(idOpts, "-o", "HostKeyAlias=gpuvm-"+vm.ID, "-o", "UserKnownHostsFile="+known, "-o", "StrictHostKeyChecking=yes")

	// gpuvm tunnel from another process, and ssh through its local port.
	tun := exec.Command(bin, "tunnel", "net-1", "22")
	tun.Env = []string{"HOME=" + c.home, "XDG_CONFIG_HOME=" + filepath.Join(c.home, ".config"), "PATH=/usr/bin:/bin"}
	stdout, err := tun.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	tun.Stderr = tun.Stdout
	if err := tun.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tun.Process.Kill(); _ = tun.Wait() })
	local := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`^Forwarding (127\.0\.0\.1:\d+) to port 22`).FindStringSubmatch(sc.Text()); m != nil {
				local <- m[1]
			}
		}
	}()
	var addr string
	select {
	case addr = <-local:
	case <-time.After(30 * time.Second):
		t.Fatal("gpuvm tunnel net-1 22 printed no local address in 30 s")
	}
	host, port, _ := strings.Cut(addr, ":")
	sshOut, err := exec.Command("ssh", append(sshOpts, "-p", port, "-l", "admin", host, "echo through the tunnel: $(hostname)")...).CombinedOutput()
	if err != nil || !strings.Contains(string(sshOut), "through the tunnel: net-1") {
		t.Errorf("ssh through gpuvm tunnel (%s): %v\n%s", addr, err, sshOut)
	}
	_ = tun.Process.Signal(syscall.SIGINT)
	waited := make(chan error, 1)
	go func() { waited <- tun.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("gpuvm tunnel after Ctrl-C: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("gpuvm tunnel did not stop within 10 s of Ctrl-C")
	}

	// Faults: a port nothing listens on, a guest without an address. Each
	// fails at once, saying why.
	for _, tc := range []struct{ vm, port, want string }{
		{"net-1", "2222", "the guest refused the connection on port 2222 of VM net-1"},
		{"offline", "22", "has no IP address"},
	} {
		start := time.Now()
		out, errOut, code := c.run("", "tunnel", tc.vm, tc.port)
		if code != 1 || !strings.Contains(errOut, tc.want) || time.Since(start) > 20*time.Second {
			t.Errorf("gpuvm tunnel %s %s: exit %d after %v\nstdout: %s\nstderr: %s\nwant exit 1 at once, saying %q",
				tc.vm, tc.port, code, time.Since(start).Round(time.Millisecond), out, errOut, tc.want)
		}
	}

	// The offline guest: ready when the boot timeout passes, and says why.
	off := w.waitReady(offline.ID, netBootTimeout+time.Minute)
	offTook := time.Since(begin)
	if want := orchestrator.BootTimeoutReason(netBootTimeout); off.Reason != want || len(off.Addresses) != 0 {
		t.Errorf("offline VM: ready after %v with reason %q and addresses %+v; want reason %q and none", offTook, off.Reason, off.Addresses, want)
	}
	if offTook < netBootTimeout {
		t.Errorf("offline VM ready after %v, before the boot timeout (%v)", offTook, netBootTimeout)
	}

	w.deleteVM(vm.ID)
	w.deleteVM(offline.ID)
	w.sameHost(hostBefore, w.simHost())
	w.sameLibvirt(lvBefore, w.libvirtState(hv))
	// The refused tunnel is answered 502, but it is the guest's refusal:
	// not an error of gpuvmd's log.
	w.noErrors()
	t.Logf("net-1: create → ready with %s in %v; gpuvm ssh answered in %v; offline: ready by the boot timeout after %v",
		vm.Addresses[0].IP, toReady.Round(100*time.Millisecond), sshTook.Round(100*time.Millisecond), offTook.Round(100*time.Millisecond))
}

// waitReady waits until a VM is running and ready, failing on a settled
// state other than running.
func (w *world) waitReady(id string, within time.Duration) api.VM {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		vm, err := w.cl.GetVM(ctx, id)
		if err != nil {
			w.t.Fatalf("waiting for VM %s to be ready: %v", id, err)
		}
		if vm.State == client.StateRunning && vm.Phase == api.PhaseReady {
			return *vm
		}
		if vm.State == client.StateFailed || vm.State == client.StateDeleted {
			w.t.Fatalf("VM %s is %s (%s), not ready", id, vm.State, vm.Reason)
		}
		select {
		case <-ctx.Done():
			w.t.Fatalf("VM %s is %s (phase %q, %s) after %v, not ready", id, vm.State, vm.Phase, vm.Reason, within)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
