package cloudinit

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A VM with a home gets the script that mounts it, alone or as a part
// beside the host key and gpuvm's own vendor data.
func TestSeedHome(t *testing.T) {
	c := testConfig()
	c.Home = &Home{Tag: "gpuvm-home", Mount: "/gpuvm/home", UID: 20001}
	files, err := Render(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	vd := files[VendorDataFile]
	golden(t, "vendor-data-home.golden", vd)
	if !bytes.Contains(vd, []byte("echo 'gpuvm-home /gpuvm/home virtiofs defaults,nofail 0 0' >> /etc/fstab")) {
		t.Errorf("no fstab line:\n%s", vd)
	}
	k, err := NewHostKey("")
	if err != nil {
		t.Fatal(err)
	}
	c.HostKey, c.VendorData = k, "#!/bin/sh\necho licensing\n"
	files, err = Render(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := string(files[VendorDataFile])
	i, j, l := strings.Index(all, `filename="gpuvm-ssh-host-key.cfg"`), strings.Index(all, `filename="gpuvm-home.sh"`), strings.Index(all, `filename="gpuvm-vendor-data"`)
	if i < 0 || j < i || l < j {
		t.Errorf("vendor-data parts out of order or missing (%d, %d, %d):\n%s", i, j, l, all)
	}
	for _, bad := range []Home{
		{Tag: "", Mount: "/gpuvm/home", UID: 20001},
		{Tag: "gpuvm-home", Mount: "/gpuvm/home; rm -rf /", UID: 20001},
		{Tag: "gpuvm-home", Mount: "/a/../b", UID: 20001},
		{Tag: "gpuvm-home", Mount: "/gpuvm/home", UID: 0},
	} {
		c := testConfig()
		c.Home = &bad
		if _, err := Render(c, nil); err == nil || !strings.Contains(err.Error(), "home") {
			t.Errorf("home %+v: %v; want an error naming the home", bad, err)
		}
	}
}

// The script is valid sh and does what it says with a stand-in fstab.
func TestHomeScriptRuns(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	script := homeScript(&Home{Tag: "gpuvm-home", Mount: "/gpuvm/home", UID: 20001}, "alice")
	if out, err := exec.Command(sh, "-n", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
	// Run with /etc/fstab, mkdir, mount and id pointed elsewhere.
	dir := t.TempDir()
	fstab := filepath.Join(dir, "fstab")
	s := strings.ReplaceAll(script, "/etc/fstab", fstab)
	s = strings.ReplaceAll(s, "mkdir -p /gpuvm/home", "true")
	s = strings.Replace(s, "mountpoint -q /gpuvm/home || mount /gpuvm/home", "false", 1)
	for i := 0; i < 2; i++ {
		out, _ := exec.Command(sh, "-c", s).CombinedOutput()
		if !strings.Contains(string(out), "could not be mounted") || !strings.Contains(string(out), "its home belongs to uid 20001") {
			t.Errorf("output %q", out)
		}
	}
	b, err := os.ReadFile(fstab)
	if err != nil || string(b) != "gpuvm-home /gpuvm/home virtiofs defaults,nofail 0 0\n" {
		t.Errorf("fstab after two runs: %q, %v", b, err)
	}
}
