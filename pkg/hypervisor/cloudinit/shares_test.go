package cloudinit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A VM with shares gets the script that mounts each, read-only ones ro,
// after the home's; bad tags or mounts are refused naming the share.
func TestSeedShares(t *testing.T) {
	c := testConfig()
	c.Home = &Home{Tag: "gpuvm-home", Mount: "/gpuvm/home", UID: 20001}
	c.Shares = []Share{{Name: "team", Tag: "gpuvm-share-team", Mount: "/gpuvm/shares/team"},
		{Name: "lab", Tag: "gpuvm-share-lab", Mount: "/data/lab", ReadOnly: true}}
	files, err := Render(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "vendor-data-shares.golden", files[VendorDataFile])
	all := string(files[VendorDataFile])
	if h, s := strings.Index(all, `filename="gpuvm-home.sh"`), strings.Index(all, `filename="gpuvm-shares.sh"`); h < 0 || s < h {
		t.Errorf("parts out of order or missing (%d, %d)", h, s)
	}
	for _, want := range []string{"echo 'gpuvm-share-team /gpuvm/shares/team virtiofs defaults,nofail 0 0' >> /etc/fstab",
		"echo 'gpuvm-share-lab /data/lab virtiofs ro,nofail 0 0' >> /etc/fstab"} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q in:\n%s", want, all)
		}
	}
	for _, bad := range []Share{
		{Name: "x", Tag: "", Mount: "/gpuvm/shares/x"},
		{Name: "x", Tag: strings.Repeat("t", 37), Mount: "/gpuvm/shares/x"},
		{Name: "x", Tag: "gpuvm-share-x", Mount: "/gpuvm/shares/x; rm -rf /"},
		{Name: "x", Tag: "gpuvm-share-x", Mount: "/a/../b"},
	} {
		c := testConfig()
		c.Shares = []Share{bad}
		if _, err := Render(c, nil); err == nil || !strings.Contains(err.Error(), "share x") {
			t.Errorf("share %+v: %v; want an error naming the share", bad, err)
		}
	}
}

// The script is valid sh and writes each fstab line once.
func TestSharesScriptRuns(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	script := sharesScript([]Share{{Name: "team", Tag: "gpuvm-share-team", Mount: "/gpuvm/shares/team"},
		{Name: "lab", Tag: "gpuvm-share-lab", Mount: "/data/lab", ReadOnly: true}})
	if out, err := exec.Command(sh, "-n", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
	fstab := filepath.Join(t.TempDir(), "fstab")
	s := strings.ReplaceAll(script, "/etc/fstab", fstab)
	s = strings.ReplaceAll(s, "mkdir -p ", "true ")
	s = strings.ReplaceAll(s, "mountpoint -q ", "false ")
	s = strings.ReplaceAll(s, "|| mount ", "|| false ")
	for i := 0; i < 2; i++ {
		out, _ := exec.Command(sh, "-c", s).CombinedOutput()
		if strings.Count(string(out), "could not be mounted") != 2 {
			t.Errorf("output %q", out)
		}
	}
	b, err := os.ReadFile(fstab)
	want := "gpuvm-share-team /gpuvm/shares/team virtiofs defaults,nofail 0 0\ngpuvm-share-lab /data/lab virtiofs ro,nofail 0 0\n"
	if err != nil || string(b) != want {
		t.Errorf("fstab after two runs: %q, %v", b, err)
	}
}
