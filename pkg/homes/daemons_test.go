package homes

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeHost is a libvirt state dir, lib dir and process table in a temp dir.
type fakeHost struct {
	t    *testing.T
	dirs LibvirtDirs
}

func newFakeHost(t *testing.T) *fakeHost {
	root := t.TempDir()
	h := &fakeHost{t: t, dirs: LibvirtDirs{StateDir: filepath.Join(root, "run"), LibDir: filepath.Join(root, "lib"), Proc: filepath.Join(root, "proc")}}
	for _, d := range []string{h.dirs.StateDir, h.dirs.LibDir, h.dirs.Proc} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h *fakeHost) write(path, text string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fakeHost) process(pid int, comm, state string) {
	dir := filepath.Join(h.dirs.Proc, strconv.Itoa(pid))
	h.write(filepath.Join(dir, "comm"), comm+"\n")
	h.write(filepath.Join(dir, "stat"), strconv.Itoa(pid)+" ("+comm+") "+state+" 1 1 1")
}

func TestDaemonsAliveAndDead(t *testing.T) {
	h := newFakeHost(t)
	// libvirt 9.0's layout for domain 7, a name longer than 20 characters.
	name := "gpuvm-0123456789abcdef-long"
	short := "7-gpuvm-0123456789abcd"
	h.write(filepath.Join(h.dirs.LibDir, "domain-"+short, "fs0-fs.pid"), "4242\n")
	h.write(filepath.Join(h.dirs.LibDir, "domain-"+short, "fs1-fs.pid"), "4343")
	h.process(4242, "virtiofsd", "S")
	h.process(4343, "bash", "S") // the pid taken again
	// Another domain's (id 17) must not be read as 7's.
	h.write(filepath.Join(h.dirs.StateDir, "17-other-fs0-fs.pid"), "99")

	got, err := Daemons(h.dirs, 7, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Alias != "fs0" || !got[0].Alive || got[1].Alias != "fs1" || got[1].Alive {
		t.Fatalf("daemons %+v", got)
	}
	if !strings.Contains(got[1].Why, "4343 is now bash") {
		t.Errorf("why %q", got[1].Why)
	}

	// The later layout, in the state dir: a gone process and a zombie.
	h.write(filepath.Join(h.dirs.StateDir, "17-other-fs0-fs.pid"), "99")
	h.write(filepath.Join(h.dirs.StateDir, "17-other-fs1-fs.pid"), "100")
	h.process(100, "virtiofsd", "Z")
	got, err = Daemons(h.dirs, 17, "other")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Alive || got[0].Why != "process 99 is gone" || got[1].Alive || got[1].Why != "process 100 has exited" {
		t.Fatalf("daemons %+v", got)
	}

	// No pid file: nothing to judge, no error.
	if got, err := Daemons(h.dirs, 8, "plain"); err != nil || len(got) != 0 {
		t.Fatalf("no filesystems: %+v, %v", got, err)
	}
	// A pid file that is not a pid is an error naming it.
	h.write(filepath.Join(h.dirs.StateDir, "9-bad-fs0-fs.pid"), "x")
	if _, err := Daemons(h.dirs, 9, "bad"); err == nil || !strings.Contains(err.Error(), "9-bad-fs0-fs.pid") {
		t.Fatalf("bad pid file: %v", err)
	}
}
