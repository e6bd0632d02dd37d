package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/windows"
)

func TestWindowsInstallRender(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const password = `W1n<&"'>pw`
	pwFile := write("admin.pw", password+"\n")
	iso := write("Win11.iso", "not really an ISO")
	virtio := write("virtio-win.iso", "not really an ISO either")
	driver := write("grid-driver.exe", "NVIDIA installer bytes")
	msi := write("CloudbaseInitSetup_x64.msi", "MSI bytes")
	out := filepath.Join(dir, "out")

	stdout, stderr, code := runCLI(t, "admin", "image", "windows-install",
		"--iso", iso, "--virtio-win", virtio, "--name", "win11-build", "--password-file", pwFile,
		"--nvidia-driver", driver, "--nvidia-args", "-s -noreboot -clean", "--cloudbase-init", msi,
		"--locale", "fr-FR", "--timezone", "Romance Standard Time", "--gpu-mdev", "B3C4D5E6-F7A8-4B9C-8D0E-1F2A3B4C5D6E", "--render", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, password) {
		t.Error("the password was printed")
	}
	if !strings.Contains(stdout, "gpuvm admin image import /var/lib/libvirt/images/win11-build.qcow2") {
		t.Errorf("next steps missing:\n%s", stdout)
	}
	for name, mode := range map[string]os.FileMode{
		windows.AnswerFile: 0o600, windows.ScriptFile: 0o644, "win11-build-media.iso": 0o600, "win11-build.xml": 0o644,
	} {
		fi, err := os.Stat(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s has mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	answer, _ := os.ReadFile(filepath.Join(out, windows.AnswerFile))
	if err := windows.WellFormed(answer); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<Value>W1n&lt;&amp;&#34;&#39;&gt;pw</Value>", "<UILanguage>fr-FR</UILanguage>", "<TimeZone>Romance Standard Time</TimeZone>"} {
		if !strings.Contains(string(answer), want) {
			t.Errorf("answer file lacks %s", want)
		}
	}
	script, _ := os.ReadFile(filepath.Join(out, windows.ScriptFile))
	if !strings.Contains(string(script), "Run (Join-Path $media 'grid-driver.exe') @('-s', '-noreboot', '-clean')") {
		t.Errorf("script does not run the driver:\n%s", script)
	}
	x, _ := os.ReadFile(filepath.Join(out, "win11-build.xml"))
	for _, want := range []string{iso, virtio, filepath.Join(out, "win11-build-media.iso"), `<tpm model="tpm-crb">`, `<loader secure="yes">`, `<address uuid="b3c4d5e6-f7a8-4b9c-8d0e-1f2a3b4c5d6e">`} {
		if !strings.Contains(string(x), want) {
			t.Errorf("domain XML lacks %s", want)
		}
	}
	if bin, err := exec.LookPath("virt-xml-validate"); err == nil {
		if o, err := exec.Command(bin, filepath.Join(out, "win11-build.xml"), "domain").CombinedOutput(); err != nil {
			t.Errorf("virt-xml-validate: %v\n%s", err, o)
		}
	}
}

func TestWindowsInstallRefuses(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("secret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	base := []string{"admin", "image", "windows-install", "--iso", "/srv/win.iso", "--virtio-win", "/srv/virtio.iso", "--name", "w", "--render", out}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no password file", base, "--password-file is required"},
		{"missing password file", append(base, "--password-file", filepath.Join(dir, "nope")), "--password-file"},
		{"bad edition", append(base, "--password-file", pw, "--edition", "vista"), `edition: "vista"`},
		{"index and name", append(base, "--password-file", pw, "--image-index", "2", "--image-name", "Pro"), "image: give an index or a name"},
		{"args without driver", append(base, "--password-file", pw, "--nvidia-args", "-s"), "--nvidia-args needs --nvidia-driver"},
		{"missing driver", append(base, "--password-file", pw, "--nvidia-driver", filepath.Join(dir, "none.exe")), "--nvidia-driver"},
		{"bad name", append(append([]string{}, base...), "--password-file", pw, "--name", "a b"), "--name"},
		{"two GPUs", append(base, "--password-file", pw, "--gpu-mdev", "b3c4d5e6-f7a8-4b9c-8d0e-1f2a3b4c5d6e", "--gpu-pci", "0000:c1:00.0"), "not both"},
		{"bad mdev", append(base, "--password-file", pw, "--gpu-mdev", "nope"), "hostdev"},
		{"bad pci", append(base, "--password-file", pw, "--gpu-pci", "c1:00"), "hostdev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want an error naming %q", code, stderr, tc.want)
			}
			if strings.Contains(stdout+stderr, "secret-pw") {
				t.Error("the password was printed")
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a refused render left %s behind", out)
			}
		})
	}
}
