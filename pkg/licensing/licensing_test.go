package licensing

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file (run with -update):\n%s", name, got)
	}
}

func TestFeatureType(t *testing.T) {
	for _, tc := range []struct {
		ft      string
		kind    gpu.Kind
		desktop bool
		want    int
	}{
		{config.FeatureAuto, gpu.KindVGPU, false, VGPU},
		{config.FeatureAuto, gpu.KindVGPU, true, VGPU},
		{config.FeatureAuto, gpu.KindMIG, false, VGPU},
		{config.FeatureAuto, gpu.KindPassthrough, true, Workstation},
		{config.FeatureAuto, gpu.KindPassthrough, false, Compute},
		{config.FeatureCompute, gpu.KindPassthrough, true, Compute},
		{config.FeatureWorkstation, gpu.KindPassthrough, false, Workstation},
		{config.FeatureVGPU, gpu.KindPassthrough, false, VGPU},
		{config.FeatureUnlicensed, gpu.KindVGPU, false, Unlicensed},
	} {
		if got := FeatureType(&config.Licensing{FeatureType: tc.ft}, tc.kind, tc.desktop); got != tc.want {
			t.Errorf("%s, %s, desktop %v: %d, want %d", tc.ft, tc.kind, tc.desktop, got, tc.want)
		}
	}
}

// A token that looks like NVIDIA's (a JWT) and one with every character
// that could end a shell or PowerShell string.
const token = "eyJhbGciOiJSUzI1NiJ9.eyJzZXJ2aWNlX2luc3RhbmNlIjoiZGxzLTAxIn0.c2lnbmF0dXJl"

func TestScriptsGolden(t *testing.T) {
	for _, ft := range []int{VGPU, Workstation, Compute} {
		g := Guest{Token: []byte(token), FeatureType: ft}
		l, err := LinuxScript(g)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "linux-feature-"+string(rune('0'+ft))+".sh", l)
		w, err := WindowsScript(g)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "windows-feature-"+string(rune('0'+ft))+".ps1", w)
		if strings.Contains(string(l), token) || strings.Contains(string(w), token) {
			t.Error("the token is in a script in clear: it must travel encoded")
		}
	}
	if _, err := LinuxScript(Guest{FeatureType: 3, Token: []byte(token)}); err == nil {
		t.Error("FeatureType 3 (gaming) accepted")
	}
	if _, err := WindowsScript(Guest{FeatureType: 1}); err == nil {
		t.Error("no token accepted")
	}
}

// The Linux script, run for real in a scratch root (its paths rewritten
// there, systemctl absent): the token lands with mode 0744, FeatureType is
// set in gridd.conf made from the template, an existing FeatureType line
// is replaced, and a token with quotes and newlines arrives byte for byte.
func TestLinuxScriptRuns(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	root := t.TempDir()
	nv := filepath.Join(root, "etc/nvidia")
	if err := os.MkdirAll(nv, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nv, "gridd.conf.template"), []byte("# template\nServerPort=443\n#FeatureType=0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nasty := "a'b\"c$(touch " + filepath.Join(root, "pwned") + ")`d`\\e"
	for i, ft := range []int{Compute, Workstation} {
		s, err := LinuxScript(Guest{Token: []byte(nasty), FeatureType: ft})
		if err != nil {
			t.Fatal(err)
		}
		script := strings.ReplaceAll(string(s), "/etc/nvidia", nv)
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = []string{"PATH=/usr/bin:/bin"} // no systemctl in a test: the message path
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, out)
		}
		tok := filepath.Join(nv, "ClientConfigToken", tokenName)
		got, err := os.ReadFile(tok)
		if err != nil || string(got) != nasty {
			t.Fatalf("token %q, %v", got, err)
		}
		if fi, _ := os.Stat(tok); fi.Mode().Perm() != 0o744 {
			t.Errorf("token mode %v, want 0744", fi.Mode().Perm())
		}
		conf, _ := os.ReadFile(filepath.Join(nv, "gridd.conf"))
		if !strings.Contains(string(conf), "ServerPort=443") || strings.Count(string(conf), "\nFeatureType=") != 1 ||
			!strings.Contains(string(conf), "\nFeatureType="+string(rune('0'+ft))+"\n") {
			t.Errorf("run %d: gridd.conf:\n%s", i, conf)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "pwned")); err == nil {
		t.Error("the token's content ran as a command")
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if b, err := ReadToken(write("ok.tok", []byte(token+"\n"))); err != nil || string(b) != token {
		t.Errorf("ReadToken = %q, %v", b, err)
	}
	for name, path := range map[string]string{
		"missing": filepath.Join(dir, "nope.tok"),
		"empty":   write("empty.tok", []byte("  \n")),
		"binary":  write("bin.tok", []byte{0x7f, 'E', 'L', 'F', 0, 1}),
		"huge":    write("huge.tok", make([]byte, maxToken+10)),
		"dir":     dir,
	} {
		b, err := ReadToken(path)
		if err == nil {
			t.Errorf("%s: accepted (%d bytes)", name, len(b))
			continue
		}
		if strings.Contains(err.Error(), token) {
			t.Errorf("%s: the error quotes a token: %v", name, err)
		}
	}
}
