package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
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
	winfsp := write("winfsp-2.0.msi", "WinFsp MSI bytes")
	out := filepath.Join(dir, "out")

	stdout, stderr, code := runCLI(t, "admin", "image", "windows-install",
		"--iso", iso, "--virtio-win", virtio, "--name", "win11-build", "--password-file", pwFile,
		"--nvidia-driver", driver, "--nvidia-args", "-s -noreboot -clean", "--cloudbase-init", msi, "--winfsp", winfsp,
		"--locale", "fr-FR", "--timezone", "Romance Standard Time", "--gpu-mdev", "B3C4D5E6-F7A8-4B9C-8D0E-1F2A3B4C5D6E", "--domain-type", "kvm", "--render", out)
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
		windows.AnswerFile: 0o600, windows.ScriptFile: 0o644, windows.TaskRunnerFile: 0o644, windows.MountsScriptFile: 0o644,
		"win11-build-media.iso": 0o600, "win11-build.xml": 0o644,
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
	if !strings.Contains(string(script), "Join-Path $media 'winfsp-2.0.msi'") || !strings.Contains(stdout, windows.MountsScriptFile) {
		t.Errorf("--winfsp: the script does not install WinFsp, or the output does not name %s:\n%s\n%s", windows.MountsScriptFile, stdout, script)
	}
	media, _ := os.ReadFile(filepath.Join(out, "win11-build-media.iso"))
	if !bytes.Contains(media, []byte("WinFsp MSI bytes")) {
		t.Error("the medium lacks WinFsp's MSI")
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
	untyped := []string{"admin", "image", "windows-install", "--iso", "/srv/win.iso", "--virtio-win", "/srv/virtio.iso", "--name", "w", "--render", out}
	base := slices.Clip(append(slices.Clone(untyped), "--domain-type", "qemu")) // every case appends to a copy
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no password file", base, "--password-file is required"},
		{"no domain type", append(slices.Clone(untyped), "--password-file", pw), "--render needs --domain-type"},
		{"bad domain type", append(base, "--password-file", pw, "--domain-type", "xen"), `domain type: "xen"`},
		{"missing password file", append(base, "--password-file", filepath.Join(dir, "nope")), "--password-file"},
		{"bad edition", append(base, "--password-file", pw, "--edition", "vista"), `edition: "vista"`},
		{"index and name", append(base, "--password-file", pw, "--image-index", "2", "--image-name", "Pro"), "image name: give an index or a name, not both"},
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

// fakeWindowsServer answers the two windows-install routes: the install VM
// runs for polls GETs, then is shut off; a second POST of a name is taken.
type fakeWindowsServer struct {
	mu    sync.Mutex
	reqs  []api.WindowsInstallRequest
	gets  int
	polls int
	auth  string
}

func (f *fakeWindowsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = r.Header.Get("Authorization")
	w.Header().Set("Content-Type", "application/json")
	st := api.WindowsInstall{Name: "win11-build", UUID: "0b6c2f0e-0000-4000-8000-000000000001", State: "running", Disk: "/pool/win11-build.qcow2"}
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/admin/images/windows-install":
		var req api.WindowsInstallRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		if len(f.reqs) > 0 && f.reqs[0].Name == req.Name {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(409)
			_ = json.NewEncoder(w).Encode(api.Problem{Type: api.ProblemBase + "conflict", Title: "Conflict", Status: 409, Field: "name", Detail: `a domain called "win11-build" exists already`})
			return
		}
		f.reqs = append(f.reqs, req)
		w.WriteHeader(202)
	case r.Method == "GET" && r.URL.Path == "/v1/admin/images/windows-install/win11-build":
		f.gets++
		if f.gets > f.polls {
			st.State, st.Done, st.Next = "shutoff", true, "gpuvm admin image import /pool/win11-build.qcow2 --name IMAGE --os windows --firmware uefi"
		}
	default:
		http.NotFound(w, r)
		return
	}
	_ = json.NewEncoder(w).Encode(st)
}

func TestWindowsInstallThroughServer(t *testing.T) {
	f := &fakeWindowsServer{polls: 2}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	admin := newCLI(t, map[string]string{"GPUVM_URL": srv.URL, "GPUVM_TOKEN": "gpuvm_admin"})
	base := []string{"admin", "image", "windows-install", "--iso", "/srv/iso/Win11.iso", "--virtio-win", "/srv/iso/virtio-win.iso",
		"--name", "win11-build", "--password-file", "/etc/gpuvm/win.pw"}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "image", "windows-install", "--iso", "/a.iso", "--virtio-win", "/v.iso", "--name", "w"}, "--password-file"},
		{append(slices.Clone(base), "--templates", "/srv/t"), "--templates works with --render only"},
		{append(slices.Clone(base), "--disk", "/srv/d.qcow2"), "--disk works with --render only"},
		{append(slices.Clone(base), "--cloudbase-init", "cb.msi"), `--cloudbase-init "cb.msi" must be an absolute path`},
		{append(slices.Clone(base), "--winfsp", "winfsp.msi"), `--winfsp "winfsp.msi" must be an absolute path`},
		{append(slices.Clone(base), "--nvidia-args", "-s"), "--nvidia-args needs --nvidia-driver"},
		{append(slices.Clone(base), "--poll", "0s"), "--poll must be positive"},
	} {
		if _, errOut, code := admin.run(c.args...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d %q, want a usage error naming %q", c.args, code, errOut, c.want)
		}
	}
	if len(f.reqs) != 0 {
		t.Fatalf("usage errors reached the server: %+v", f.reqs)
	}

	out := admin.must(append(slices.Clone(base), "--edition", "server2022", "--cloudbase-init", "/srv/cb.msi", "--winfsp", "/srv/winfsp.msi", "--nvidia-driver", "/srv/grid.exe",
		"--nvidia-args", "-s -noreboot -clean", "--disk-gib", "80", "--gpu-pci", "0000:c1:00.0,0000:c1:00.1", "--wait", "--poll", "10ms")...)
	for _, want := range []string{"Started the install VM win11-build", "virsh send-key win11-build KEY_ENTER", "win11-build running", "win11-build shutoff",
		"gpuvm admin image import /pool/win11-build.qcow2 --name IMAGE --os windows --firmware uefi"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "win11-build running") != 1 {
		t.Errorf("an unchanged state printed twice:\n%s", out)
	}
	if f.gets != 3 || f.auth != "Bearer gpuvm_admin" {
		t.Errorf("%d GETs (want 3: two running, one off), auth %q", f.gets, f.auth)
	}
	want := api.WindowsInstallRequest{Name: "win11-build", Edition: "server2022", ISO: "/srv/iso/Win11.iso", VirtIOWin: "/srv/iso/virtio-win.iso",
		PasswordFile: "/etc/gpuvm/win.pw", CloudbaseInit: "/srv/cb.msi", WinFsp: "/srv/winfsp.msi", NVIDIADriver: "/srv/grid.exe", NVIDIAArgs: []string{"-s", "-noreboot", "-clean"},
		DiskGiB: 80, Network: "default", VCPUs: 4, MemoryGiB: 8, GPUPCI: []string{"0000:c1:00.0", "0000:c1:00.1"}}
	if len(f.reqs) != 1 || !reflect.DeepEqual(f.reqs[0], want) {
		t.Errorf("asked\n%+v\nwant\n%+v", f.reqs, want)
	}

	// Taken: the server's refusal, exit 1; without --wait no GET.
	gets := f.gets
	if _, errOut, code := admin.run(base...); code != 1 || !strings.Contains(errOut, "exists already") {
		t.Errorf("taken: exit %d %q", code, errOut)
	}
	f.reqs = nil
	out = admin.must(append(slices.Clone(base), "--json")...)
	var st api.WindowsInstall
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.State != "running" || f.gets != gets {
		t.Errorf("--json without --wait: %v %+v (GETs %d -> %d)", err, st, gets, f.gets)
	}
	// An explicit --domain-type goes to gpuvmd as asked (which refuses kvm
	// where KVM is unusable); without one, domain_type is left out above.
	f.reqs = nil
	admin.must(append(slices.Clone(base), "--domain-type", "qemu")...)
	if len(f.reqs) != 1 || f.reqs[0].DomainType != "qemu" {
		t.Errorf("--domain-type qemu asked %+v", f.reqs)
	}
}

func TestWindowsTaskRunner(t *testing.T) {
	want, err := windows.TaskRunner(nil)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, "admin", "image", "windows-task-runner")
	if code != 0 || stdout != string(want) {
		t.Fatalf("exit %d, stdout is the runner: %v\n%s", code, stdout == string(want), stderr)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "gpuvm-task.ps1")
	if _, stderr, code := runCLI(t, "admin", "image", "windows-task-runner", "-o", out); code != 0 {
		t.Fatalf("-o: exit %d\n%s", code, stderr)
	}
	if b, _ := os.ReadFile(out); string(b) != string(want) {
		t.Error("-o FILE does not hold the runner")
	}
	tmpl := filepath.Join(dir, "tmpl")
	if err := os.Mkdir(tmpl, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmpl, windows.TaskRunnerFile+".tmpl"), []byte("# mine, v{{.Protocol}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if stdout, _, code := runCLI(t, "admin", "image", "windows-task-runner", "--templates", tmpl); code != 0 || stdout != "# mine, v2\n" {
		t.Errorf("--templates: exit %d, %q", code, stdout)
	}
	for _, args := range [][]string{{"--templates", filepath.Join(dir, "none")}, {"extra"}} {
		_, stderr, code := runCLI(t, append([]string{"admin", "image", "windows-task-runner"}, args...)...)
		if code != 2 || !strings.Contains(stderr, "windows-task-runner") {
			t.Errorf("%v: exit %d, %q; want a usage error naming the command", args, code, stderr)
		}
	}
}
