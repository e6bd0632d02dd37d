package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/test/guest"
)

// envBenchHomeIO runs TestHomeIOBenchmark (make bench-homeio): minutes of
// guest I/O under software emulation, which make test does not spend.
const envBenchHomeIO = "GPUVM_BENCH_HOMEIO"

// The guest's I/O benchmark (issue #27): from inside the tiny guest under
// software emulation, as its owner, on the same host file system, a
// person's home (virtiofs) against an ext4 data disk (virtio-blk, a qcow2
// volume of the pool) and the guest's own memory (its root, for the
// reference): a sequential write of homeIOMiB (flushed), the same file
// written over again (on the data disk, its qcow2 clusters then
// allocated), and homeIOFiles small files made (then sync), each place in
// turn, homeIORounds rounds;
// medians and the ratios between places, measured in one run. The data
// disk's file system is made on the host (mke2fs) before the VM is made
// with it, labelled gpuvm-data: the tiny guest mounts it at
// /mnt/gpuvm-data (its users have no root).
const (
	homeIOMiB    = 128
	homeIOFiles  = 2000
	homeIORounds = 3
)

// homeIOScript is the guest's shell that measures one round in dir (key
// names it), in dir/run: the times, from /proc/uptime, before and after
// each part.
func homeIOScript(dir, key string) string {
	return fmt.Sprintf(`d=%[1]s/run; k=%[2]s; mkdir -p $d && cd $d && `+
		`read a _ </proc/uptime && dd if=/dev/zero of=seq bs=1M count=%[3]d conv=fsync 2>/dev/null && read b _ </proc/uptime && echo ${k}_seq=$a,$b && `+
		`read a _ </proc/uptime && dd if=/dev/zero of=seq bs=1M count=%[3]d conv=notrunc,fsync 2>/dev/null && read b _ </proc/uptime && echo ${k}_rewrite=$a,$b && `+
		`read a _ </proc/uptime && i=0 && while [ $i -lt %[4]d ]; do echo "file $i" >f$i; i=$((i+1)); done && sync && read b _ </proc/uptime && echo ${k}_files=$a,$b && `+
		`cd / && rm -rf $d`, dir, key, homeIOMiB, homeIOFiles)
}

func TestHomeIOBenchmark(t *testing.T) {
	if os.Getenv(envBenchHomeIO) == "" {
		t.Skipf("a benchmark: set %s=1 (make bench-homeio)", envBenchHomeIO)
	}
	hv := needSystemLibvirt(t)
	for _, tool := range []string{"ssh", "ssh-keygen", "mke2fs", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing: %v", tool, err)
		}
	}
	if _, err := homes.FindVirtiofsd(nil); err != nil {
		t.Skipf("no virtiofs daemon (Debian: qemu-system-common): %v", err)
	}
	needDefaultNetwork(t)
	tiny := setUpTinyGuest(t, hv)
	// The homes beside the pool: one host file system for both.
	root := filepath.Join(filepath.Dir(tiny.blank), "homes")
	profiles := strings.NewReplacer("KERNEL", tiny.files[tiny.kernel], "INITRD", tiny.files[tiny.initrd],
		"CMDLINE", guest.Cmdline, "BLANK", tiny.blank).Replace(homeProfiles)
	w := newWorld(t, worldConfig{preset: "h100x8", uri: systemURI, pool: tiny.pool, profiles: profiles,
		storage: fmt.Sprintf("    homes {\n      root = %q\n    }", root)})
	w.start()
	vms := w.deleteLeftOnFailure()
	key, pub := sshKeyPair(t)
	sh := &guestShell{t: t, key: key}
	ann := w.homePerson("ann")
	w.dataDiskWithFS(hv, ann, "data", 512)
	vm := w.createFor(ann, "bench", pub, vms, "data")
	w.login(&ann)
	w.waitReady(vm, 3*time.Minute)
	got := sh.run(ann, "bench", `awk '$2 == "/mnt/gpuvm-data" || $2 == "`+homeMount+`" { print "fs_" $3 "=" $2 }' /proc/mounts; echo fs=done`)
	if got["fs_ext4"] != "/mnt/gpuvm-data" || got["fs_virtiofs"] != homeMount {
		t.Fatalf("the guest's mounts: %v; want the data disk's ext4 at /mnt/gpuvm-data and the home's virtiofs at %s", got, homeMount)
	}

	places := []struct{ key, dir, what string }{
		{"home", homeMount, "home (virtiofs)"},
		{"disk", "/mnt/gpuvm-data/b", "data disk (ext4 on virtio-blk)"},
		{"ram", "/home/ann", "the guest's memory (its root)"},
	}
	seq, rewrite, files := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	for range homeIORounds {
		for _, p := range places {
			got := sh.run(ann, "bench", homeIOScript(p.dir, p.key))
			seq[p.key] = append(seq[p.key], float64(homeIOMiB)/span(t, got[p.key+"_seq"]))
			rewrite[p.key] = append(rewrite[p.key], float64(homeIOMiB)/span(t, got[p.key+"_rewrite"]))
			files[p.key] = append(files[p.key], float64(homeIOFiles)/span(t, got[p.key+"_files"]))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "from inside the tiny guest (1 vCPU, software emulation), %d rounds, medians:\n", homeIORounds)
	for _, p := range places {
		fmt.Fprintf(&b, "  %-32s sequential write %6.1f MiB/s, rewrite %6.1f MiB/s (%d MiB, flushed)   small files %6.0f made/s (%d, then sync)\n",
			p.what, median(seq[p.key]), median(rewrite[p.key]), homeIOMiB, median(files[p.key]), homeIOFiles)
	}
	fmt.Fprintf(&b, "  data disk / home: sequential write %.2f×, rewrite %.2f×, small files %.2f×\n",
		median(seq["disk"])/median(seq["home"]), median(rewrite["disk"])/median(rewrite["home"]), median(files["disk"])/median(files["home"]))
	randomReads(t, sh, ann, root, &b)
	t.Log(b.String())
	w.deleteVM(vm)
	vms.done(vm)
}

// Random reads (the published gap between virtio-blk and virtiofs is
// widest there): gpuvm-randread (test/guest/randread), built here and put
// in ann's home on the host, reads 4 KiB blocks at random offsets of a
// file of randReadMiB, one at a time, for randReadSeconds, with O_DIRECT
// (the guest's page cache out of the way; both paths end in the host's
// page cache), in the home and on the data disk, and in the guest's memory
// (a smaller file, cached: the reference).
const (
	randReadMiB     = 256
	randReadSeconds = 10
)

func randomReads(t *testing.T, sh *guestShell, ann homePerson, root string, b *strings.Builder) {
	t.Helper()
	tool := filepath.Join(root, "ann", "gpuvm-randread")
	build := exec.Command(goTool(), "build", "-trimpath", "-o", tool, "github.com/gpuvm/gpuvm/test/guest/randread")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build gpuvm-randread: %v\n%s", err, out)
	}
	uid := fileOwner(t, filepath.Join(root, "ann"))
	if err := os.Chown(tool, uid, uid); err != nil {
		t.Fatal(err)
	}
	iops := map[string]float64{}
	for _, p := range []struct {
		key, file, what string
		mib             int
	}{
		{"home", homeMount + "/rr", "home (virtiofs)", randReadMiB},
		{"disk", "/mnt/gpuvm-data/b/rr", "data disk (ext4 on virtio-blk)", randReadMiB},
		{"ram", "/home/ann/rr", "the guest's memory (its root)", 64},
	} {
		got := sh.run(ann, "bench", fmt.Sprintf("%s/gpuvm-randread %s %d %d && rm -f %s", homeMount, p.file, p.mib, randReadSeconds, p.file))
		n, err := strconv.ParseFloat(got["iops"], 64)
		if err != nil {
			t.Fatalf("gpuvm-randread in %s: %v", p.what, got)
		}
		iops[p.key] = n
		fmt.Fprintf(b, "  %-32s random 4 KiB reads %6.0f /s (direct %s; p50 %s µs, p99 %s µs; %d MiB file, %d s)\n",
			p.what, n, got["direct"], got["p50_us"], got["p99_us"], p.mib, randReadSeconds)
	}
	fmt.Fprintf(b, "  data disk / home: random reads %.2f×\n", iops["disk"]/iops["home"])
}

// span is the seconds between the two /proc/uptime readings of "a,b".
func span(t *testing.T, v string) float64 {
	t.Helper()
	a, b, ok := strings.Cut(v, ",")
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("the guest's times %q", v)
	}
	return max(y-x, 0.01) // /proc/uptime counts hundredths
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// dataDiskWithFS makes the person's data disk name of sizeMiB through the
// API, then, on the host, an ext4 file system on it labelled gpuvm-data
// with a directory b anyone may write (qemu-img and mke2fs over the
// volume's file, before any VM has it).
func (w *world) dataDiskWithFS(hv *hypervisor.Conn, p homePerson, name string, sizeMiB int) {
	w.t.Helper()
	v, err := p.cl.CreateVolume(w.ctx(time.Minute), name, fmt.Sprintf("%dMiB", sizeMiB))
	if err != nil {
		w.t.Fatalf("create volume %s: %v", name, err)
	}
	vols, err := hv.Volumes(w.ctx(30*time.Second), w.pool)
	if err != nil {
		w.t.Fatal(err)
	}
	i := slices.IndexFunc(vols, func(s string) bool { return strings.Contains(s, v.ID) })
	if i < 0 {
		w.t.Fatalf("no volume of %s in pool %s: %q", v.ID, w.pool, vols)
	}
	path, err := hv.VolumePath(w.ctx(30*time.Second), w.pool, vols[i])
	if err != nil {
		w.t.Fatal(err)
	}
	dir := w.t.TempDir()
	tree := filepath.Join(dir, "tree")
	raw := filepath.Join(dir, "fs.raw")
	if err := os.MkdirAll(filepath.Join(tree, "b"), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(tree, "b"), 0o1777); err != nil {
		w.t.Fatal(err)
	}
	for _, c := range [][]string{
		{"qemu-img", "create", "-q", "-f", "raw", raw, fmt.Sprintf("%dM", sizeMiB)},
		{"mke2fs", "-q", "-F", "-t", "ext4", "-L", "gpuvm-data", "-d", tree, raw},
		{"qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", raw, path},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			w.t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
}

// goTool is the go command: on PATH, else the one that built this test.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}
