package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/homes"
)

// What people keep, backed up and restored together as docs/install.md
// says: the database with `gpuvmd backup` and the homes root with tar
// (numeric owners, modes, sparse files), both while gpuvmd serves. Then the
// state directory and the homes are lost; `gpuvmd restore` and tar put them
// back: ann's home is there with her file, owned by her uid, which the
// restored database still gives her, so her next VM mounts it unchanged (no
// owner corrected) and `gpuvm home ls` shows it. libvirt's test driver
// inside gpuvmd: no guest boots; the homes are real directories. As root
// (homes are given to their person's uid).
func TestBackupRestoresHomes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("homes are given to each person's uid: root only")
	}
	if _, err := homes.FindVirtiofsd(nil); err != nil {
		t.Skipf("no virtiofs daemon (Debian: qemu-system-common): %v", err)
	}
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("tar is missing")
	}
	root := filepath.Join(t.TempDir(), "homes")
	profile := strings.Replace(gpuProfile("desk", `kind = "mig"`+"\n    profile = \"1g.10gb\""), "vcpus  = 1", "vcpus  = 1\n  home   = true", 1)
	w := newWorld(t, worldConfig{preset: "h100x8", uri: testDriverURI, pool: testDriverPool, profiles: profile,
		storage: fmt.Sprintf("    homes {\n      root = %q\n    }", root)})
	w.start()
	ann := w.homePerson("ann")
	vmOf := func(p homePerson, name string) string {
		resp, err := p.cl.CreateVM(w.ctx(30*time.Second), api.CreateVMRequest{Profile: "desk", Name: name}, "")
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		w.waitState(resp.VM.ID, client.StateRunning, time.Minute)
		return resp.VM.ID
	}
	one := vmOf(ann, "one")
	uid := homeOwner(t, root, "ann")
	notes := filepath.Join(root, "ann", "notes.txt")
	if err := os.WriteFile(notes, []byte("ann's notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(notes, uid, uid); err != nil {
		t.Fatal(err)
	}
	w.deleteVM(one)

	// The backup, as docs/install.md says, while gpuvmd serves.
	backups := t.TempDir()
	archive := filepath.Join(backups, "gpuvm.tar.gz")
	w.gpuvmd("backup", "--to", archive)
	homesTar := filepath.Join(backups, "homes.tar")
	tar(t, "-C", root, "--numeric-owner", "--sparse", "--exclude=./.images", "--exclude=./.locks", "-cpf", homesTar, ".")

	// Both lost (the admin keeps their token: it is in the database, the
	// file is only how the first admin got it).
	token, err := os.ReadFile(filepath.Join(w.state, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	w.stop()
	for _, dir := range []string{w.state, root} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Both restored, before gpuvmd starts.
	w.gpuvmd("restore", "--from", archive)
	tar(t, "-C", root, "--numeric-owner", "-xpf", homesTar)
	if err := os.WriteFile(filepath.Join(w.state, "admin.token"), token, 0o600); err != nil {
		t.Fatal(err)
	}
	w.start()
	if ann.cl, err = client.New(w.proc.URL(), ann.token); err != nil {
		t.Fatal(err)
	}
	list, err := ann.cl.ListHomes(w.ctx(30 * time.Second))
	if err != nil || len(list.Homes) != 1 || !list.Homes[0].Exists {
		t.Fatalf("ann's homes after the restore: %+v %v", list, err)
	}
	vmOf(ann, "two")
	if got := homeOwner(t, root, "ann"); got != uid {
		t.Errorf("after the restore ann's home is uid %d's, want %d", got, uid)
	}
	if b, err := os.ReadFile(notes); err != nil || string(b) != "ann's notes\n" || fileOwner(t, notes) != uid {
		t.Errorf("ann's notes after the restore: %q %v", b, err)
	}
	if logs := w.allLogs(); strings.Contains(logs, "home's owner corrected") {
		t.Error("the restored home's owner was corrected: the restored database gives ann another uid")
	}
	w.noErrors()
}

func tar(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("tar", args...).CombinedOutput(); err != nil {
		t.Fatalf("tar %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
