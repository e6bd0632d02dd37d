package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/quota"
	"github.com/gpuvm/gpuvm/test/guest"
)

// homeProfiles are netProfiles' tiny-mig with the owner's home (home =
// true), a system disk (an overlay of the blank image, which the
// snapshots take), and configs/dev's tiny-seed template, which gives the
// account the owner's uid. KERNEL, INITRD, CMDLINE and BLANK are filled in.
const homeProfiles = `
template "tiny-seed" {
  content = <<EOT
#cloud-config
hostname: ${hostname}
users:
  - name: ${user}
%{ if uid > 0 ~}
    uid: ${uid}
%{ endif ~}
    ssh_authorized_keys:
%{ for key in ssh_authorized_keys ~}
      - ${key}
%{ endfor ~}
EOT
}

image "blank" {
  path     = "BLANK"
  format   = "raw"
  firmware = "bios"
}

profile "tiny-home" {
  vcpus  = 1
  memory = "512MiB"
  home   = true
  disk { image = "blank" }
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
`

// homeMount is where the guest mounts the home (storage.homes' default).
const homeMount = "/gpuvm/home"

// homePerson is one user of TestHomeFollowsThePerson: a token of theirs,
// their API client and their gpuvm CLI, logged in with the token.
type homePerson struct {
	name, token string
	cl          *client.Client
	cli         cliRun // once login made it
}

// The owner's home, with the tiny guest under a real libvirtd and QEMU, as
// issue #27 asks: ann's first VM writes a file in /gpuvm/home (virtiofs),
// owned in the guest by her stable uid; the VM is deleted; the file is on
// the host, in her home, with that content and owner; her second VM reads
// it back. Her home quota (32 MiB: where the host has no project quotas, a
// filesystem image of that size) cuts a 48 MiB write short in her guest,
// and the next round of the home quotas warns her. bob's VM, running
// beside ann's first, has his own home at the
// same path: empty, his uid, not hers. bob's virtiofs daemon is then
// killed under his running guest, his VM says so within seconds, and the
// stop and start the reason advises give him his home back; ann
// snapshots ann-2's system disk while it runs, writes over it, stops it,
// restores the snapshot and starts it: the disk holds what it held
// (homefaults_test.go). Everything through `gpuvm ssh` and the CLI as
// each person. As root, with qemu:///system, the network "default" and
// QEMU's virtiofsd; not with -short or GPUVM_SKIP_SYSTEM_TEST=1.
func TestHomeFollowsThePerson(t *testing.T) {
	hv := needSystemLibvirt(t)
	for _, tool := range []string{"ssh", "ssh-keygen", "virsh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing (scripts/setup-host.sh installs openssh-client and libvirt-clients): %v", tool, err)
		}
	}
	if _, err := homes.FindVirtiofsd(nil); err != nil {
		t.Skipf("no virtiofs daemon (Debian: qemu-system-common): %v", err)
	}
	needDefaultNetwork(t)
	begin := time.Now()
	tiny := setUpTinyGuest(t, hv)
	root := t.TempDir()
	// ann's home may be an image home (a quota, no project quotas here):
	// unmounted before the directory goes, lazily should a VM still hold it.
	t.Cleanup(func() { _ = syscall.Unmount(filepath.Join(root, "ann"), syscall.MNT_DETACH) })
	profiles := strings.NewReplacer("KERNEL", tiny.files[tiny.kernel], "INITRD", tiny.files[tiny.initrd],
		"CMDLINE", guest.Cmdline, "BLANK", tiny.blank).Replace(homeProfiles) + annHomeQuota
	team := newTeamShare(t) // shares_test.go
	w := newWorld(t, worldConfig{preset: "h100x8", uri: systemURI, pool: tiny.pool, profiles: team.profile(profiles),
		storage: fmt.Sprintf("    homes {\n      root = %q\n    }", root) + team.storage,
		args:    []string{"--home-quota-every", "2s"}})
	team.releaseViews(t, w)
	w.start()
	up := time.Since(begin)
	hostBefore, lvBefore := w.simHost(), w.libvirtState(hv)
	vms := w.deleteLeftOnFailure()

	key, sshKey := sshKeyPair(t)
	sh := &guestShell{t: t, key: key}
	ann, bob := w.homePerson("ann"), w.homePerson("bob")

	disk := w.diskMade(ann, bob) // disks_test.go

	// ann's first VM and bob's boot side by side.
	ann1 := w.createFor(ann, "ann-1", sshKey, vms, "scratch")
	bob1 := w.createFor(bob, "bob-1", sshKey, vms)
	w.recordConsole(hv, ann1)
	w.recordConsole(hv, bob1)
	w.login(&ann)
	w.login(&bob)
	w.waitReady(ann1, 3*time.Minute)
	w.waitReady(bob1, 3*time.Minute)
	booted := time.Since(begin)

	// ann writes her notes; the file is hers in the guest.
	content := "ann's notes " + randHex(8)
	got := sh.run(ann, "ann-1", fmt.Sprintf("echo %q > %s/notes.txt && %s && echo file_uid=$(stat -c %%u %s/notes.txt)",
		content, homeMount, guestFacts, homeMount))
	annUID := homeOwner(t, root, "ann")
	checkHomeFacts(t, "ann-1", got, annUID)
	if got["file_uid"] != strconv.Itoa(annUID) {
		t.Errorf("ann-1: notes.txt is owned by uid %q in the guest, want ann's %d", got["file_uid"], annUID)
	}
	// Her quota holds in the guest.
	quotaHeld := w.homeQuotaHolds(sh, ann, "ann-1", root)
	// bob's home, at the same path, is his: empty, his uid.
	got = sh.run(bob, "bob-1", guestFacts+" && echo entries=$(ls -A "+homeMount+" | tr '\\n' ' ')")
	bobUID := homeOwner(t, root, "bob")
	checkHomeFacts(t, "bob-1", got, bobUID)
	if bobUID == annUID {
		t.Errorf("ann and bob have one uid, %d", annUID)
	}
	if got["entries"] != "" {
		t.Errorf("bob-1 sees %q in %s: want bob's own home, empty", got["entries"], homeMount)
	}
	diskBytes := w.diskWritten(sh, ann, bob, disk, bob1)
	team.check(t, w, hv, sh, ann, bob, bob1) // shares_test.go
	// bob's file server dies under his running guest (homefaults_test.go).
	virtiofsSeen := w.virtiofsdKilled(hv, bob, bob1, ann1)
	recovered := w.virtiofsRecovering(sh, bob, bob1) // bob stops it; started below

	// ann's first VM goes; her notes stay on the host, hers.
	w.deleteVM(ann1)
	vms.done(ann1)
	notes := filepath.Join(root, "ann", "notes.txt")
	b, err := os.ReadFile(notes)
	if err != nil || string(b) != content+"\n" {
		t.Fatalf("on the host after ann-1 is deleted, %s holds %q (%v), want %q", notes, b, err, content+"\n")
	}
	if uid := fileOwner(t, notes); uid != annUID {
		t.Errorf("on the host, %s is owned by uid %d, want ann's %d", notes, uid, annUID)
	}

	// Her next VM reads them back.
	ann2 := w.createFor(ann, "ann-2", sshKey, vms, "scratch")
	w.recordConsole(hv, ann2)
	w.waitReady(ann2, 3*time.Minute)
	got = sh.run(ann, "ann-2", guestFacts+" && echo notes=$(cat "+homeMount+"/notes.txt)")
	checkHomeFacts(t, "ann-2", got, annUID)
	if got["notes"] != content {
		t.Errorf("ann-2 reads %q from %s/notes.txt, want what ann-1 wrote, %q", got["notes"], homeMount, content)
	}
	w.diskRead(sh, ann, disk, diskBytes)
	// A snapshot of ann-2's system disk, restored (homefaults_test.go).
	snapTook, restoreTook := w.snapshotRestored(sh, ann, ann2)
	// Its data disk unplugged and plugged in again while it runs.
	unplugTook, plugTook := w.diskReplugged(sh, ann, disk, diskBytes) // disks_test.go
	// bob's VM, stopped meanwhile, is started again: its home is back.
	bobStop, bobStart := recovered()
	delBob := w.deleteAsync(bob1)

	delBob()
	vms.done(bob1)
	w.deleteVM(ann2)
	vms.done(ann2)
	w.diskGone(hv, ann, disk)
	w.sameHost(hostBefore, w.simHost())
	w.sameLibvirt(lvBefore, w.libvirtState(hv))
	if entries, err := os.ReadDir(filepath.Join(root, "bob")); err != nil || len(entries) != 0 {
		t.Errorf("bob's home on the host holds %v (%v), want nothing", entries, err)
	}
	if sh.retried {
		w.noErrors("path=/v1/tunnel/ws status=502") // a connection to a guest not yet on the network
	} else {
		w.noErrors()
	}
	t.Logf("ann (uid %d) and bob (uid %d): gpuvmd up %v after the start, ann-1 and bob-1 ready at %v, all done at %v; bob-1's killed virtiofs daemon said %v after the kill; ann-2's live snapshot %v, its restore %v (the CLI's --wait, end to end)",
		annUID, bobUID, up.Round(100*time.Millisecond), booted.Round(100*time.Millisecond), time.Since(begin).Round(100*time.Millisecond),
		virtiofsSeen.Round(100*time.Millisecond), snapTook.Round(10*time.Millisecond), restoreTook.Round(10*time.Millisecond))
	t.Logf("ann-2's data disk, while it runs: unplugged in %v, plugged in again in %v (the CLI's --wait, end to end)",
		unplugTook.Round(10*time.Millisecond), plugTook.Round(10*time.Millisecond))
	t.Logf("ann's home quota: %s", quotaHeld)
	t.Logf("bob-1 after its virtiofs daemon died: stopped %v after 'gpuvm stop' (its shutdown waits on the hung mount until forced off), started and answering over SSH %v later",
		bobStop.Round(100*time.Millisecond), bobStart.Round(100*time.Millisecond))
}

// guestFacts is the shell of the guest that prints what checkHomeFacts
// checks: the account's uid and what is mounted at the home's path.
const guestFacts = "echo uid=$(id -u) && echo mount=$(awk '$2 == \"" + homeMount + "\" { print $1, $3 }' /proc/mounts)"

// checkHomeFacts checks guestFacts' answer: the home is the virtiofs tag
// gpuvm-home at homeMount, and the account has the owner's uid.
func checkHomeFacts(t *testing.T, vm string, got map[string]string, uid int) {
	t.Helper()
	if want := config.HomeTag + " virtiofs"; got["mount"] != want {
		t.Errorf("%s: %s is %q in /proc/mounts, want %q", vm, homeMount, got["mount"], want)
	}
	if got["uid"] != strconv.Itoa(uid) {
		t.Errorf("%s: the account has uid %q, want its owner's, %d (the owner of the home on the host)", vm, got["uid"], uid)
	}
}

// sshKeyPair makes an ed25519 key without a passphrase: the private
// key's path and the public key's authorized_keys line.
func sshKeyPair(t *testing.T) (key, pub string) {
	t.Helper()
	key = filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuvm-e2e", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	b, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return key, strings.TrimSpace(string(b))
}

// guestShell runs shell commands in the test's VMs with `gpuvm ssh`.
type guestShell struct {
	t   *testing.T
	key string // the private key whose public half the VMs were made with
	// retried: a connection failed and was tried again; gpuvmd then
	// logged the tunnel's 502 as an error.
	retried bool
}

// sshPatience is how long a VM that is ready (its address leased) may
// take to answer SSH: on a busy machine the guest's DHCP client may see
// the lease's acknowledgment seconds after libvirt's DHCP server made it.
const sshPatience = 90 * time.Second

// run runs command in a VM as the person and returns the lines of its
// output of the form key=value. A connection that fails (ssh's exit 255)
// is tried again until sshPatience has passed.
func (g *guestShell) run(p homePerson, vm, command string) map[string]string {
	g.t.Helper()
	args := []string{"ssh", vm, "--", "-F", "/dev/null", "-i", g.key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "ConnectTimeout=30", command}
	deadline := time.Now().Add(sshPatience)
	for {
		out, errOut, code := p.cli.run("", args...)
		if code == 255 && time.Now().Before(deadline) {
			g.t.Logf("%s: gpuvm ssh %s: exit 255, trying again: %s", p.name, vm, strings.TrimSpace(errOut))
			g.retried = true
			time.Sleep(2 * time.Second)
			continue
		}
		if code != 0 {
			g.t.Fatalf("%s: gpuvm ssh %s -- %q: exit %d\nstdout: %s\nstderr: %s", p.name, vm, command, code, out, errOut)
		}
		got := map[string]string{}
		for _, line := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), "="); ok {
				got[k] = strings.TrimSpace(v)
			}
		}
		return got
	}
}

// homePerson makes a user, a token of theirs, and their API client.
func (w *world) homePerson(name string) homePerson {
	w.t.Helper()
	ctx := w.ctx(30 * time.Second)
	if _, err := w.cl.CreateUser(ctx, api.CreateUserRequest{Name: name}); err != nil {
		w.t.Fatalf("create user %s: %v", name, err)
	}
	tok, err := w.cl.CreateToken(ctx, name, api.CreateTokenRequest{Name: "e2e"})
	if err != nil {
		w.t.Fatalf("token of %s: %v", name, err)
	}
	cl, err := client.New(w.proc.URL(), tok.Secret)
	if err != nil {
		w.t.Fatal(err)
	}
	cl.PollMin, cl.PollMax = 20*time.Millisecond, 250*time.Millisecond
	return homePerson{name: name, token: tok.Secret, cl: cl}
}

// login logs the person's gpuvm CLI in (built on the first call: while
// the guests boot).
func (w *world) login(p *homePerson) {
	w.t.Helper()
	p.cli = cliRun{t: w.t, bin: gpuvmCLI(w.t), home: w.t.TempDir()}
	if out, errOut, code := p.cli.run(p.token, "login", w.proc.URL()); code != 0 {
		w.t.Fatalf("gpuvm login as %s: exit %d %s %s", p.name, code, out, errOut)
	}
}

// createFor asks for a VM of profile tiny-home as the person, with an SSH
// key, and returns its ID.
func (w *world) createFor(p homePerson, name, sshKey string, vms *liveVMs, volumes ...string) string {
	w.t.Helper()
	resp, err := p.cl.CreateVM(w.ctx(30*time.Second), api.CreateVMRequest{Profile: "tiny-home", Name: name, SSHKeys: []string{sshKey}, Volumes: volumes}, "")
	if err != nil {
		w.t.Fatalf("%s: create %s: %v", p.name, name, err)
	}
	vms.add(resp.VM.ID)
	return resp.VM.ID
}

// deleteAsync asks for a VM's deletion now; the function it returns waits
// until the VM is deleted.
func (w *world) deleteAsync(id string) func() {
	w.t.Helper()
	op, err := w.cl.DeleteVM(w.ctx(30*time.Second), id)
	if err != nil {
		w.t.Fatalf("delete VM %s: %v", id, err)
	}
	return func() {
		w.t.Helper()
		w.waitOperation(op.ID, time.Minute)
		w.waitState(id, client.StateDeleted, time.Minute)
	}
}

// liveVMs are the VMs a test made and has not yet deleted.
type liveVMs struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (v *liveVMs) add(id string)  { v.mu.Lock(); v.ids[id] = true; v.mu.Unlock() }
func (v *liveVMs) done(id string) { v.mu.Lock(); delete(v.ids, id); v.mu.Unlock() }

// deleteLeftOnFailure deletes, as the test ends, the VMs it made and did
// not delete (a test that stopped half way), while gpuvmd still runs, so
// that no domain, volume or pool is left behind.
func (w *world) deleteLeftOnFailure() *liveVMs {
	vms := &liveVMs{ids: map[string]bool{}}
	w.t.Cleanup(func() {
		vms.mu.Lock()
		defer vms.mu.Unlock()
		for id := range vms.ids {
			if w.cl == nil {
				w.t.Errorf("VM %s is left: gpuvmd no longer runs", id)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			op, err := w.cl.DeleteVM(ctx, id)
			if err == nil {
				_, err = w.cl.WaitOperation(ctx, op.ID, nil)
			}
			cancel()
			if err != nil {
				w.t.Errorf("delete VM %s left by the test: %v", id, err)
			}
		}
	})
	return vms
}

// homeOwner is the uid that owns login's home on the host; the home must
// be a directory of mode 0700.
func homeOwner(t *testing.T, root, login string) int {
	t.Helper()
	dir := filepath.Join(root, login)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatalf("the home of %s: %v", login, err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("the home of %s is %v, want a directory of mode 0700", login, fi.Mode())
	}
	uid := fileOwner(t, dir)
	if uid < 20000 || uid > 59999 {
		t.Errorf("the home of %s is owned by uid %d, outside the default uid_min–uid_max 20000–59999", login, uid)
	}
	return uid
}

func fileOwner(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatalf("%s: no owner in %T", path, fi.Sys())
	}
	return int(st.Uid)
}

// recordConsole reads a running VM's serial console (the pty QEMU made;
// the live domain XML names it) from now until the test ends, and logs it
// when the test failed: what the guest said of its home.
func (w *world) recordConsole(hv *hypervisor.Conn, vmID string) {
	w.t.Helper()
	w.waitState(vmID, client.StateRunning, time.Minute)
	doc, err := hv.XML(w.ctx(30*time.Second), vmID, false)
	if err != nil {
		w.t.Fatalf("the domain of VM %s: %v", vmID, err)
	}
	var x libvirtxml.Domain
	if err := x.Unmarshal(doc); err != nil {
		w.t.Fatal(err)
	}
	var pty string
	for _, s := range x.Devices.Serials {
		if s.Source != nil && s.Source.Pty != nil {
			pty = s.Source.Pty.Path
		}
	}
	f, err := os.Open(pty)
	if err != nil {
		w.t.Logf("VM %s: its console is not recorded: %v", vmID, err)
		return
	}
	var mu sync.Mutex
	var seen strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			mu.Lock()
			seen.WriteString(strings.TrimRight(sc.Text(), "\r") + "\n")
			mu.Unlock()
		}
	}()
	w.t.Cleanup(func() {
		f.Close()
		<-done
		if w.t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			w.t.Logf("the console of VM %s:\n%s", vmID, seen.String())
		}
	})
}

// annHomeQuota is ann's home quota (policy storage.home_quota).
const annHomeQuota = `
policy {
  user "ann" {
    storage {
      home_quota = "32MiB"
    }
  }
}
`

// homeQuotaHolds checks, in p's VM vm, that p's 32 MiB home quota holds
// where this host makes image homes (no project quotas on the test's
// temporary directory, gpuvmd root, loop devices): the home is a
// filesystem of that size on the host, and a 48 MiB write in the guest,
// through virtiofs, fails. It says which enforcement it found.
func (w *world) homeQuotaHolds(sh *guestShell, p homePerson, vm, root string) string {
	w.t.Helper()
	enf := homes.QuotaEnforcement(root, quota.Probe, homes.ImageSupport)
	if enf.Mode != quota.Image {
		return enf.Mode + " (" + enf.Why + "): not checked in the guest"
	}
	img := filepath.Join(root, homes.ImagesDir, p.name+".ext4")
	if fi, err := os.Stat(img); err != nil || fi.Size() != 32<<20 {
		w.t.Fatalf("%s's home: image %s: %v, want one of 32MiB", p.name, img, err)
	}
	got := sh.run(p, vm, "dd if=/dev/zero of="+homeMount+"/big bs=1M count=48 2>/dev/null; "+
		"ls -l "+homeMount+"/big | awk '{ print \"size=\" $5 }'")
	size, _ := strconv.ParseInt(got["size"], 10, 64)
	if size <= 0 || size >= 32<<20 {
		w.t.Errorf("%s: a 48MiB write into a home of 32MiB: %v; want it cut short, under 32MiB", vm, got)
	}
	// The full home's owner is warned by the next round of the home quotas
	// (--home-quota-every), with what the home can hold.
	begin := time.Now()
	ctx := w.ctx(time.Minute)
	events, err := p.cl.Events(ctx, client.EventsOptions{FromStart: true})
	if err != nil {
		w.t.Fatalf("%s's events: %v", p.name, err)
	}
	defer events.Close()
	var warning api.VolumeWarningPayload
	for warning.Kind == "" {
		e, err := events.Next(ctx)
		if err != nil {
			w.t.Fatalf("%s: no volume.warning after the home filled (%v): %v", p.name, time.Since(begin).Round(time.Second), err)
		}
		if e.Type == api.EventVolumeWarning {
			if err := json.Unmarshal(e.Payload, &warning); err != nil {
				w.t.Fatal(err)
			}
		}
	}
	warned := time.Since(begin)
	if warning.Kind != api.VolumeHome || warning.Enforcement != quota.Image || warning.Percent < 90 || !strings.Contains(warning.Reason, "writes past the quota will fail") {
		w.t.Errorf("%s's warning: %+v", p.name, warning)
	}
	got = sh.run(p, vm, "rm -f "+homeMount+"/big; echo gone=$(ls -A "+homeMount+" | grep -c '^big$')")
	if got["gone"] != "0" {
		w.t.Errorf("%s: the file that filled the home is not removable: %v", vm, got)
	}
	return fmt.Sprintf("a filesystem image of 32MiB; a 48MiB write in the guest stopped at %d bytes; warned %v after (%d %%: %s)",
		size, warned.Round(100*time.Millisecond), warning.Percent, warning.Reason)
}
