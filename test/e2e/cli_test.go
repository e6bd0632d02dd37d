package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/test/testbin"
)

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// gpuvmCLI builds the gpuvm binary as people get it: pure Go, CGO_ENABLED=0.
func gpuvmCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		if p := testbin.Prebuilt("gpuvm"); p != "" { // built with CGO_ENABLED=0 too
			cliPath = p
			return
		}
		dir, err := os.MkdirTemp("", "gpuvm-cli-")
		if err != nil {
			cliErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "gpuvm"), "./cmd/gpuvm")
		cmd.Dir = testbin.Root()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			cliErr = err
			t.Logf("%s", out)
			return
		}
		cliPath = filepath.Join(dir, "gpuvm")
	})
	if cliErr != nil {
		t.Fatalf("build the gpuvm CLI with CGO_ENABLED=0: %v", cliErr)
	}
	return cliPath
}

// cliRun runs the gpuvm binary with a home of its own.
type cliRun struct {
	t    *testing.T
	bin  string
	home string
}

func (c cliRun) run(stdin string, args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = []string{"HOME=" + c.home, "XDG_CONFIG_HOME=" + filepath.Join(c.home, ".config"), "PATH=/usr/bin:/bin"}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		c.t.Fatalf("gpuvm %s ran for 2 minutes", strings.Join(args, " "))
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func (c cliRun) must(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run("", args...)
	if code != 0 {
		c.t.Fatalf("gpuvm %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func (c cliRun) json(v any, args ...string) {
	c.t.Helper()
	out := c.must(append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("gpuvm %s --json: %v in %q", strings.Join(args, " "), err, out)
	}
}

// The gpuvm binary against a real gpuvmd (simulated h100x8, libvirt's test
// driver inside gpuvmd): log in, create with --wait, list, show, extend,
// stop, start, follow events, delete; every --json parsed and checked.
func TestCLIAgainstGpuvmd(t *testing.T) {
	bin := gpuvmCLI(t)
	w := newWorld(t, worldConfig{preset: "h100x8", uri: "test:///default", pool: testDriverPool,
		profiles: gpuProfile("mig-seat", `kind = "mig"`+"\n    profile = \"1g.10gb\"")})
	w.start()
	token, err := os.ReadFile(filepath.Join(w.state, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	c := cliRun{t: t, bin: bin, home: t.TempDir()}

	// login reads the token from the standard input and saves it 0600.
	if out, errOut, code := c.run(string(token), "login", w.proc.URL()); code != 0 {
		t.Fatalf("login: exit %d %s %s", code, out, errOut)
	}
	fi, err := os.Stat(filepath.Join(c.home, ".config", "gpuvm", "config.hcl"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved config: %v %v", fi, err)
	}

	var profiles []map[string]any
	c.json(&profiles, "profiles")
	if len(profiles) != 1 || profiles[0]["name"] != "mig-seat" {
		t.Errorf("profiles: %v", profiles)
	}

	out := c.must("create", "mig-seat", "--name", "box", "--hours", "2", "--wait")
	if !strings.Contains(out, "VM box is running") {
		t.Errorf("create --wait:\n%s", out)
	}
	var list api.VMList
	c.json(&list, "list")
	if len(list.Items) != 1 || list.Items[0].Name != "box" || list.Items[0].State != "running" {
		t.Fatalf("list: %+v", list)
	}
	var vm api.VM
	vm = api.VM{} // omitted fields must not keep what the last answer had
	c.json(&vm, "show", "box")
	if vm.ID != list.Items[0].ID || len(vm.GPUs) != 1 || vm.GPUs[0].Type != "1g.10gb" || vm.GPUs[0].Kind != "mig" || vm.LeaseEnd == nil {
		t.Fatalf("show: %+v", vm)
	}
	lease := *vm.LeaseEnd

	var extended api.VM
	c.json(&extended, "extend", "box", "--hours", "1")
	if extended.LeaseEnd == nil || extended.LeaseEnd.Sub(lease) != time.Hour || extended.Hours != 3 {
		t.Errorf("extend: lease %v → %v, hours %d", lease, extended.LeaseEnd, extended.Hours)
	}
	if _, errOut, code := c.run("", "extend", "box", "--hours", "100"); code != 1 || !strings.Contains(errOut, "hours") {
		t.Errorf("extend past the maximum: exit %d %q", code, errOut)
	}

	c.must("stop", "box", "--wait")
	vm = api.VM{} // omitted fields must not keep what the last answer had
	c.json(&vm, "show", "box")
	if vm.State != "stopped" || len(vm.GPUs) != 0 || !strings.Contains(vm.Reason, "its GPU was given back") {
		t.Errorf("after stop (the GPU given back): %+v", vm)
	}
	c.must("start", "box", "--wait")
	vm = api.VM{} // omitted fields must not keep what the last answer had
	c.json(&vm, "show", "box")
	if vm.State != "running" || len(vm.GPUs) != 1 || vm.GPUs[0].Type != "1g.10gb" {
		t.Errorf("after start (on a GPU again): %+v", vm)
	}

	// The events of that history, replayed.
	evOut := c.must("events", "--vm", "box", "--after", "0", "--count", "6", "--json")
	var types []string
	for _, l := range strings.Split(strings.TrimSpace(evOut), "\n") {
		var e api.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.VMID != vm.ID {
			t.Fatalf("event line %q: %v", l, err)
		}
		types = append(types, e.Type)
	}
	if len(types) != 6 || types[0] != api.EventVMCreated {
		t.Errorf("event types %v", types)
	}

	// delete asks unless --yes; no answer on a non-terminal is a refusal.
	if _, _, code := c.run("", "delete", "box"); code == 0 {
		t.Error("delete without --yes and without an answer went ahead")
	}
	c.must("delete", "box", "--yes", "--wait")
	c.json(&list, "list")
	for _, v := range list.Items {
		if v.Name == "box" && v.State != "deleted" {
			t.Errorf("after delete: %+v", v)
		}
	}
	// A bad token: exit 3 (no server / refused), with a hint.
	bad := cliRun{t: t, bin: bin, home: t.TempDir()}
	if _, errOut, code := bad.run("", "list", "--url", w.proc.URL(), "--token", "nope"); code != 3 || !strings.Contains(errOut, "refused the token") {
		t.Errorf("bad token: exit %d %q", code, errOut)
	}
	w.noErrors()
}
