//go:build linux && (amd64 || arm64 || riscv64 || loong64 || s390x)

package quota

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

func TestConstants(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want int
	}{
		{"QCMD(Q_GETQUOTA, PRJQUOTA)", qcmd(qGetQuota, prjQuota), 0x80000702},
		{"QCMD(Q_SETQUOTA, PRJQUOTA)", qcmd(qSetQuota, prjQuota), 0x80000802},
		{"QCMD(Q_XGETQSTAT, PRJQUOTA)", qcmd(qXGetQStat, prjQuota), 0x580502},
		{"sizeof(struct if_dqblk)", int(unsafeSizeofDqblk()), 72},
		{"sizeof(struct fsxattr)", int(unsafeSizeofFsxattr()), 28},
		{"_IOR('X', 31, struct fsxattr)", fsIocFSGetXattr, 2<<30 | 28<<16 | 'X'<<8 | 31},
		{"_IOW('X', 32, struct fsxattr)", fsIocFSSetXattr, 1<<30 | 28<<16 | 'X'<<8 | 32},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %#x, want %#x", tc.name, tc.got, tc.want)
		}
	}
}

// LoopQuotaFS makes a 64 MiB ext4 image with project quotas, loop-mounts
// it with prjquota and returns the mount point; it skips, saying why,
// where that cannot be done (not root, no loop devices, a kernel without
// ext4 quota support). The e2e test uses it too.
func LoopQuotaFS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("project quotas: needs root (mount)")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("project quotas: no mkfs.ext4")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", "-O", "quota,project", img).CombinedOutput(); err != nil {
		t.Skipf("project quotas: mkfs.ext4 -O quota,project: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop,prjquota", img, mnt).CombinedOutput(); err != nil {
		dmesg, _ := exec.Command("dmesg").Output()
		if i := bytes.LastIndex(dmesg, []byte("EXT4-fs")); i >= 0 {
			out = append(out, dmesg[i:]...)
		}
		t.Skipf("project quotas: cannot loop-mount an ext4 image with prjquota here: %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// A 4 MiB quota on a directory: an 8 MiB write fails with EDQUOT, the
// usage reads back, and with the limit cleared the write goes through.
func TestProjectQuota(t *testing.T) {
	mnt := LoopQuotaFS(t)
	e, err := Probe(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if e.Mode != Project || e.FSType != "ext4" {
		t.Fatalf("Probe(%s) = %+v, want project quotas on ext4", mnt, e)
	}
	home := filepath.Join(mnt, "ann")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "before"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	const id = 20001
	if err := SetProject(home, id); err != nil {
		t.Fatal(err)
	}
	if err := SetLimit(e.Device, id, 4<<20); err != nil {
		t.Fatal(err)
	}
	u, err := Get(e.Device, id)
	if err != nil {
		t.Fatal(err)
	}
	if u.Limit != 4<<20 || u.Used < 1<<20 {
		t.Errorf("usage %+v, want the 1 MiB already there counted, limit 4 MiB", u)
	}
	err = writeFile(filepath.Join(home, "big"), 8<<20)
	if !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("8 MiB past a 4 MiB quota: %v, want EDQUOT", err)
	}
	if u, err = Get(e.Device, id); err != nil || u.Used > 4<<20+64<<10 {
		t.Errorf("after the refused write: %+v %v", u, err)
	}
	if err := SetLimit(e.Device, id, 0); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(home, "big"), 8<<20); err != nil {
		t.Errorf("with the limit cleared: %v", err)
	}
	if u, err = Get(e.Device, id); err != nil || u.Limit != 0 || u.Used < 9<<20 {
		t.Errorf("cleared: %+v %v", u, err)
	}
	if err := SetProject(home, id); err != nil { // again: nothing to do
		t.Error(err)
	}
}

func writeFile(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, n))
	if err2 := f.Sync(); err == nil {
		err = err2
	}
	if err2 := f.Close(); err == nil {
		err = err2
	}
	return err
}
