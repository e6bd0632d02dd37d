package quota

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	text := `22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
36 22 7:0 / /var/lib/gpuvm/homes rw,relatime shared:2 - ext4 /dev/loop0 rw,prjquota
37 22 0:31 / /tmp rw,nosuid - tmpfs tmpfs rw,size=100k
38 22 7:1 / /mnt/with\040space rw master:1 opt:2 - xfs /dev/loop1 rw,pquota
`
	ms, err := ParseMountinfo(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 4 {
		t.Fatalf("%d mounts, want 4: %+v", len(ms), ms)
	}
	for _, tc := range []struct {
		major, minor uint32
		path         string
		want         string // mount point; "" none
		src, typ     string
		opt          string
	}{
		{7, 0, "/var/lib/gpuvm/homes/ann", "/var/lib/gpuvm/homes", "/dev/loop0", "ext4", "prjquota"},
		{7, 0, "/var/lib/gpuvm/homes", "/var/lib/gpuvm/homes", "/dev/loop0", "ext4", "prjquota"},
		{7, 0, "/var/lib/gpuvm/homesx", "", "", "", ""},
		{259, 2, "/srv", "/", "/dev/nvme0n1p2", "ext4", "errors"},
		{7, 1, "/mnt/with space/a", "/mnt/with space", "/dev/loop1", "xfs", "pquota"},
		{0, 31, "/var", "", "", "", ""},
	} {
		m, ok := MountOf(ms, tc.major, tc.minor, tc.path)
		if tc.want == "" {
			if ok {
				t.Errorf("%s on %d:%d: found %+v, want none", tc.path, tc.major, tc.minor, m)
			}
			continue
		}
		if !ok || m.MountPoint != tc.want || m.Source != tc.src || m.FSType != tc.typ || !HasOption(m.Options, tc.opt) {
			t.Errorf("%s on %d:%d: %+v %v, want %s from %s (%s, %s)", tc.path, tc.major, tc.minor, m, ok, tc.want, tc.src, tc.typ, tc.opt)
		}
	}
	for _, bad := range []string{"1 2 3", "36 22 7 / /x rw - ext4 /dev/x rw", "36 22 7:0 / /x rw shared:2 ext4 /dev/loop0 rw"} {
		if _, err := ParseMountinfo(bad); err == nil || !strings.Contains(err.Error(), "mountinfo line 1") {
			t.Errorf("ParseMountinfo(%q): %v, want an error naming the line", bad, err)
		}
	}
}

func TestHasOption(t *testing.T) {
	for _, tc := range []struct {
		opts, o string
		want    bool
	}{
		{"rw,prjquota", "prjquota", true},
		{"rw,prjquota=1", "prjquota", true},
		{"rw,noprjquota", "prjquota", false},
		{"rw,pquota", "prjquota", false},
		{"", "rw", false},
	} {
		if got := HasOption(tc.opts, tc.o); got != tc.want {
			t.Errorf("HasOption(%q, %q) = %v", tc.opts, tc.o, got)
		}
	}
}

func TestDescribe(t *testing.T) {
	none := Enforcement{Mode: None, FSType: "ext4", Why: "/dev/sda1 is mounted without project quotas"}.Describe("the homes", "/var/lib/gpuvm/homes")
	for _, want := range []string{"the homes at /var/lib/gpuvm/homes are on ext4 without project quotas", "writes past the quota are not refused", "-O quota,project", "prjquota"} {
		if !strings.Contains(none, want) {
			t.Errorf("%q lacks %q", none, want)
		}
	}
	on := Enforcement{Mode: Project, FSType: "xfs", Device: "/dev/block/7:0"}.Describe("the homes", "/h")
	if !strings.Contains(on, "with project quotas (/dev/block/7:0): writes past a quota are refused") {
		t.Errorf("%q", on)
	}
}

// The fallback: a plain directory measured by walking it, sparse files at
// what they take, the walk bounded.
func TestWalkUsage(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 256<<10)
	for i := range data {
		data[i] = byte(i)
	}
	for _, p := range []string{"f1", "a/f2", "a/b/f3"} {
		if err := os.WriteFile(filepath.Join(dir, p), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sparse, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	sparse.Close()
	if err := os.Symlink("/usr", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	used, err := WalkUsage(context.Background(), dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if used < 3*256<<10 || used > 3*256<<10+1<<20 {
		t.Errorf("used %d, want about %d (three 256 KiB files; the sparse one takes nothing; /usr not followed)", used, 3*256<<10)
	}
	partial, err := WalkUsage(context.Background(), dir, 3)
	if err == nil || !strings.Contains(err.Error(), "stopped after 3 entries") || partial > used {
		t.Errorf("bounded walk: %d, %v", partial, err)
	}
	if _, err := WalkUsage(context.Background(), filepath.Join(dir, "missing"), 10); err == nil {
		t.Error("a missing directory measured")
	}
	e, err := Probe(dir)
	if err != nil {
		t.Fatal(err)
	}
	if e.Mode != None && e.Mode != Project || e.Why == "" {
		t.Errorf("Probe(%s) = %+v", dir, e)
	}
	t.Logf("%s", e.Describe("the test directory", dir))
}
