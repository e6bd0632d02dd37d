package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/shares"
)

// teamShare is share "team" of TestHomeFollowsThePerson: a host directory
// read-write for ann and read-only for bob, which profile tiny-home
// mounts in each of their VMs (issue #27's shares).
type teamShare struct {
	dir string
	// storage is the share block for worldConfig.storage.
	storage string
}

// teamMount is where the guest mounts it (the default, /gpuvm/shares/NAME).
const teamMount = config.DefaultSharesMount + "/team"

// newTeamShare makes the share's directory, writable by every uid (the
// people's uids are gpuvm's, made at their first VM).
func newTeamShare(t *testing.T) teamShare {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return teamShare{dir: dir, storage: fmt.Sprintf("\n    share \"team\" {\n      path       = %q\n      read_write = [\"user:ann\"]\n      read_only  = [\"user:bob\"]\n    }", dir)}
}

// releaseViews removes, at the end, the read-only views gpuvmd makes in
// w's state directory (bind mounts), before that directory goes.
func (s teamShare) releaseViews(t *testing.T, w *world) {
	t.Cleanup(func() {
		if err := shares.Release(w.state, nil); err != nil {
			t.Errorf("remove the read-only views: %v", err)
		}
	})
}

// profile is profiles with tiny-home mounting the share always.
func (s teamShare) profile(profiles string) string {
	return strings.Replace(profiles, "  home   = true\n", "  home   = true\n  shares = [\"team\"]\n", 1)
}

// check: ann writes a file to the share in ann-1, which lands on the host
// as hers; bob reads it in bob-1 and his write fails; bob's virtiofs device
// is served from gpuvmd's read-only view of the directory, which refuses
// a write on the host too, so no root in his guest can make it writable.
func (s teamShare) check(t *testing.T, w *world, hv *hypervisor.Conn, sh *guestShell, ann, bob homePerson, bobVM string) {
	t.Helper()
	mountOf := "echo share_mount=$(awk '$2 == \"" + teamMount + "\" { print $1, $3, substr($4, 1, 2) }' /proc/mounts)"
	content := "team data " + randHex(8)
	got := sh.run(ann, "ann-1", fmt.Sprintf("echo %q > %s/from-ann.txt && echo wrote=yes; %s", content, teamMount, mountOf))
	if got["wrote"] != "yes" || got["share_mount"] != "gpuvm-share-team virtiofs rw" {
		t.Errorf("ann-1: wrote=%q, %s is %q in /proc/mounts; want the write, and virtiofs rw", got["wrote"], teamMount, got["share_mount"])
	}
	if b, err := os.ReadFile(filepath.Join(s.dir, "from-ann.txt")); err != nil || string(b) != content+"\n" {
		t.Errorf("on the host, the share holds %q (%v), want what ann-1 wrote", b, err)
	}
	got = sh.run(bob, "bob-1", fmt.Sprintf("echo read=$(cat %s/from-ann.txt); (echo bob > %s/from-bob.txt) 2>/dev/null; echo write_rc=$?; %s",
		teamMount, teamMount, mountOf))
	if got["read"] != content {
		t.Errorf("bob-1 reads %q from the share, want ann's %q", got["read"], content)
	}
	if got["write_rc"] == "0" || got["share_mount"] != "gpuvm-share-team virtiofs ro" {
		t.Errorf("bob-1: a write exits %q, %s is %q; want a failed write on a ro virtiofs mount", got["write_rc"], teamMount, got["share_mount"])
	}
	if _, err := os.Stat(filepath.Join(s.dir, "from-bob.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bob's write reached the host: %v", err)
	}
	// The host's side: what bob's virtiofs daemon serves is read-only.
	src := shareSource(t, w, hv, bobVM, config.ShareTag("team"))
	if want := filepath.Join(w.state, shares.DirName, "team"); src != want {
		t.Fatalf("bob-1's share is served from %q, want the read-only view %s", src, want)
	}
	err := os.WriteFile(filepath.Join(src, "host-write.txt"), nil, 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Errorf("a write through bob-1's share source on the host: %v, want EROFS", err)
	}
}

// shareSource is the host directory of the virtiofs device tag of vmID's
// domain.
func shareSource(t *testing.T, w *world, hv *hypervisor.Conn, vmID, tag string) string {
	t.Helper()
	d := w.domainOf(hv, vmID)
	doc, err := hv.XML(w.ctx(30*time.Second), d.UUID, false)
	if err != nil {
		t.Fatalf("domain of %s: %v", vmID, err)
	}
	var x libvirtxml.Domain
	if err := x.Unmarshal(doc); err != nil || x.Devices == nil {
		t.Fatalf("domain of %s: %v", vmID, err)
	}
	for _, f := range x.Devices.Filesystems {
		if f.Target != nil && f.Target.Dir == tag && f.Source != nil && f.Source.Mount != nil {
			return f.Source.Mount.Dir
		}
	}
	t.Fatalf("domain of %s has no filesystem with tag %s", vmID, tag)
	return ""
}
