package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

// cli runs gpuvm's run() with an environment of its own.
type cli struct {
	t    *testing.T
	env  map[string]string
	term *terminal // nil: no terminal, empty stdin
}

func newCLI(t *testing.T, env map[string]string) *cli {
	t.Helper()
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["HOME"]; !ok {
		env["HOME"] = t.TempDir()
	}
	return &cli{t: t, env: env}
}

func (c *cli) run(args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	var out, errb bytes.Buffer
	term := c.term
	if term == nil {
		term = &terminal{in: strings.NewReader("")}
	}
	ctx := context.WithValue(context.Background(), testSeamsKey{}, &testSeams{term: term, poll: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := run(ctx, args, func(k string) string { return c.env[k] }, &out, &errb)
	code = exitCode(err, &errb)
	return out.String(), errb.String(), code
}

// must runs and wants exit 0.
func (c *cli) must(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("gpuvm %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func decodeStrict(t *testing.T, s string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%v in %s", err, s)
	}
}

func TestLogin(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	home := t.TempDir()
	c := newCLI(t, map[string]string{"HOME": home})
	path := filepath.Join(home, ".config", "gpuvm", "config.hcl")

	// Nothing configured yet.
	if _, errOut, code := c.run("list"); code != 3 || !strings.Contains(errOut, "gpuvm login") {
		t.Errorf("no server: exit %d %q", code, errOut)
	}
	// A refused token is not saved.
	if _, errOut, code := c.run("login", env.URL, "--token", "wrong"); code != 3 || !strings.Contains(errOut, "refused the token") {
		t.Errorf("bad token: exit %d %q", code, errOut)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a refused token was saved: %v", err)
	}
	// The token from stdin.
	c.term = &terminal{in: strings.NewReader(env.UserToken + "\n"), inTTY: true}
	out, errOut, code := c.run("login", env.URL+"/")
	if code != 0 || !strings.Contains(out, "3 profiles") || !strings.Contains(errOut, "Token for") {
		t.Fatalf("login: exit %d %q %q", code, out, errOut)
	}
	c.term = nil
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v %v", fi, err)
	}
	cf, err := readClientConfig(path)
	if err != nil || cf.URL != env.URL || cf.Token != env.UserToken {
		t.Fatalf("saved %+v %v", cf, err)
	}
	// Later commands use it.
	if out := c.must("profiles", "--quiet"); out != "broken\nmig-seat\nseat\n" {
		t.Errorf("profiles: %q", out)
	}
	// The saved token is not sent to another server.
	var gotAuth string
	var mu sync.Mutex
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotAuth = r.Header.Get("Authorization")
		mu.Unlock()
		io.WriteString(w, "[]")
	}))
	defer other.Close()
	c.must("profiles", "--url", other.URL)
	mu.Lock()
	if gotAuth != "" {
		t.Errorf("the saved token went to %s: %q", other.URL, gotAuth)
	}
	mu.Unlock()
	// Environment beats the file, flags beat the environment.
	c.env["GPUVM_TOKEN"] = "wrong"
	if _, _, code := c.run("profiles"); code != 3 {
		t.Errorf("GPUVM_TOKEN did not win: exit %d", code)
	}
	c.must("profiles", "--token", env.UserToken)

	// XDG_CONFIG_HOME, and --token instead of stdin.
	xdg := t.TempDir()
	c2 := newCLI(t, map[string]string{"XDG_CONFIG_HOME": xdg})
	c2.must("login", env.URL, "--token", env.AdminToken)
	if fi, err := os.Stat(filepath.Join(xdg, "gpuvm", "config.hcl")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("XDG config: %v %v", fi, err)
	}
	c2.must("admin", "gpus")
	// Nothing on stdin.
	if _, errOut, code := c2.run("login", env.URL); code != 2 || !strings.Contains(errOut, "no token") {
		t.Errorf("empty stdin: exit %d %q", code, errOut)
	}
}

// TestDeleteOffTerminal: off a terminal (/dev/null, which is a character
// device but no terminal; a pipe; a file), delete without --yes is the usage
// error its help says (exit 2) and deletes nothing.
func TestDeleteOffTerminal(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Step: 5 * time.Millisecond})
	c := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	if help := c.must("delete", "--help"); !strings.Contains(help, "without --yes (exit 2)") {
		t.Fatalf("delete's help no longer says exit 2:\n%s", help)
	}
	c.must("create", "seat", "--name", "box")
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pw.Close()
	defer pr.Close()
	path := filepath.Join(t.TempDir(), "answers")
	os.WriteFile(path, []byte("y\n"), 0o600)
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, in := range []*os.File{devNull, pr, file} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var out, errb bytes.Buffer
		// No test seams: gpuvm looks at its standard input itself.
		root := newRoot(func(k string) string { return c.env[k] }, &out, &errb)
		root.SetIn(in)
		root.SetArgs([]string{"delete", "box"})
		code := exitCode(root.ExecuteContext(ctx), &errb)
		cancel()
		if code != 2 || !strings.Contains(errb.String(), "not a terminal") || !strings.Contains(errb.String(), "--yes") {
			t.Errorf("delete box < %s: exit %d, stdout %q, stderr %q", in.Name(), code, out.String(), errb.String())
		}
	}
	var vm api.VM
	decodeStrict(t, c.must("show", "box", "--json"), &vm)
	if vm.State == api.VMDeleted {
		t.Errorf("box was deleted: %+v", vm)
	}
}

// TestCreateWaitCredentials: create --wait of a VM whose guest uses the
// VM's one-time password (its cloud-init template sets it) says how to get
// it, once the VM is ready; of one whose guest does not (a DCV desktop
// without such a template, Sunshine whose password gpuvm desktop reads
// itself, a plain seat), it does not.
func TestCreateWaitCredentials(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Step: 5 * time.Millisecond, Profiles: `
template "pw" {
  content = "#cloud-config\npassword: ${password_hash}\n"
}
profile "seat" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
profile "rdp" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  cloud_init { template = "pw" }
  desktop {
    protocol = "rdp"
  }
}
profile "dcv" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  desktop {
    protocol = "dcv"
  }
}
profile "sunshine" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  desktop {
    protocol    = "sunshine"
    credentials = "vm"
  }
}
`})
	c := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	for _, tc := range []struct {
		profile string
		tells   bool
	}{{"rdp", true}, {"dcv", false}, {"seat", false}, {"sunshine", false}} {
		t.Run(tc.profile, func(t *testing.T) {
			name := tc.profile + "-1"
			out := c.must("create", tc.profile, "--name", name, "--wait")
			line := "Password:        gpuvm credentials " + name + " (the desktop's one-time password: it is shown once)\n"
			if !strings.Contains(out, "VM "+name+" is running") || strings.Contains(out, line) != tc.tells || strings.Contains(out, "gpuvm credentials") != tc.tells {
				t.Errorf("create %s --wait (tells: %v):\n%s", tc.profile, tc.tells, out)
			}
			// Its answer for scripts is unchanged.
			if out := c.must("create", tc.profile, "--name", name+"q", "--wait", "--quiet"); strings.Contains(out, "credentials") {
				t.Errorf("create --wait --quiet:\n%s", out)
			}
		})
	}
}

func TestVMCommands(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Step: 5 * time.Millisecond})
	c := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	keyFile := filepath.Join(t.TempDir(), "id.pub")
	os.WriteFile(keyFile, []byte("# mine\nssh-ed25519 AAAA ann@laptop\n\n"), 0o644)

	// Profiles.
	out := c.must("profiles")
	if !strings.Contains(out, "mig-seat") || !strings.Contains(out, "MIG 3g.40gb") || !strings.Contains(out, "2h/8h") {
		t.Errorf("profiles:\n%s", out)
	}
	var ps []map[string]any
	decodeStrict(t, c.must("profiles", "--json"), &ps)
	if len(ps) != 3 || ps[2]["name"] != "seat" || ps[2]["description"] != "a test seat" {
		t.Errorf("profiles --json: %v", ps)
	}

	// Create and wait.
	out = c.must("create", "seat", "--name", "box", "--hours", "3", "--ssh-key", keyFile, "--wait")
	if !strings.Contains(out, "Created VM box") || !strings.Contains(out, "running: ready\n") || !strings.Contains(out, "VM box is running on test-host") ||
		!strings.Contains(out, "gpuvm show box") || !strings.Contains(out, "(3h left)") ||
		!strings.Contains(out, "/24 (lease, vnet0)") || !strings.Contains(out, "gpuvm ssh box") || !strings.Contains(out, "gpuvm console box (VNC)") {
		t.Errorf("create --wait:\n%s", out)
	}
	// Without waiting, --quiet: the ID.
	id2 := strings.TrimSpace(c.must("create", "seat", "--name", "second", "--quiet"))
	if len(id2) < 10 || strings.ContainsAny(id2, " \n") {
		t.Errorf("create --quiet: %q", id2)
	}
	var created api.CreateVMResponse
	decodeStrict(t, c.must("create", "seat", "--name", "third", "--json"), &created)
	if created.VM.Name != "third" || created.Operation.Kind != "create" {
		t.Errorf("create --json: %+v", created)
	}
	// A VM that fails: exit 1 with the reason.
	_, errOut, code := c.run("create", clienttest.FailProfile, "--wait")
	if code != 1 || !strings.Contains(errOut, "failed: the test worker fails this profile") {
		t.Errorf("failing VM: exit %d %q", code, errOut)
	}
	// Server-side refusals: exit 1 with the problem.
	if _, errOut, code := c.run("create", "nope"); code != 1 || !strings.Contains(errOut, `unknown profile "nope"`) {
		t.Errorf("unknown profile: exit %d %q", code, errOut)
	}
	if _, errOut, code := c.run("create", "seat", "--name", "box"); code != 1 || !strings.Contains(errOut, "Conflict") {
		t.Errorf("same name: exit %d %q", code, errOut)
	}

	// Let the others run.
	waitFor(t, func() bool {
		var l api.VMList
		decodeStrict(t, c.must("list", "--json", "--state", "running"), &l)
		return len(l.Items) == 3
	})

	// list.
	var l api.VMList
	decodeStrict(t, c.must("list", "--json"), &l)
	names := map[string]api.VM{}
	for _, vm := range l.Items {
		names[vm.Name] = vm
	}
	if len(l.Items) != 4 || names["box"].State != "running" || names["box"].Hours != 3 || names["second"].ID != id2 ||
		names["box"].Addresses != nil || names["box"].Console != nil {
		t.Errorf("list --json: %+v", l)
	}
	ids := strings.Fields(c.must("list", "--quiet"))
	if len(ids) != 4 || ids[0] != names["box"].ID {
		t.Errorf("list --quiet: %q", ids)
	}
	out = c.must("list")
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "box") || !strings.Contains(out, "failed") || strings.Contains(out, "OWNER") {
		t.Errorf("list:\n%s", out)
	}
	decodeStrict(t, c.must("list", "--json", "--state", "failed"), &l)
	if len(l.Items) != 1 || l.Items[0].Reason == "" {
		t.Errorf("list --state failed: %+v", l)
	}

	// show.
	var vm api.VM
	decodeStrict(t, c.must("show", "box", "--json"), &vm)
	if vm.ID != names["box"].ID || vm.State != "running" || vm.LeaseEnd == nil || len(vm.Addresses) != 1 || vm.Console == nil ||
		vm.Console.VVURL != env.URL+"/v1/vms/"+vm.ID+"/console.vv" {
		t.Fatalf("show --json: %+v", vm)
	}
	out = c.must("show", vm.ID)
	for _, want := range []string{"VM box (" + vm.ID + ")", "running (ready)", "3 hours, until",
		"Addresses:  " + vm.Addresses[0].IP + "/24 (lease, vnet0)\n", "Display:    gpuvm console box (VNC)\n",
		"SSH:        gpuvm ssh box\n", "Tunnel:     gpuvm tunnel box PORT"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	// A seat has no desktop and its guest uses no password: neither is offered.
	for _, not := range []string{"gpuvm rdp", "gpuvm desktop", "gpuvm credentials", "Remote desktop"} {
		if strings.Contains(out, not) {
			t.Errorf("show offers %q:\n%s", not, out)
		}
	}
	if _, errOut, code := c.run("show", "nope"); code != 1 || !strings.Contains(errOut, `Not found: no VM "nope"`) {
		t.Errorf("show nope: exit %d %q", code, errOut)
	}

	// delete: refuses without --yes off a terminal; asks on one.
	if _, errOut, code := c.run("delete", "box"); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Errorf("delete without --yes: exit %d %q", code, errOut)
	}
	c.term = &terminal{in: strings.NewReader("n\n"), inTTY: true}
	if _, errOut, code := c.run("delete", "box"); code != 1 || !strings.Contains(errOut, "Delete VM box") || !strings.Contains(errOut, "Nothing was deleted") {
		t.Errorf("delete, answered no: exit %d %q", code, errOut)
	}
	c.term = &terminal{in: strings.NewReader("y\n"), inTTY: true}
	if out, errOut, code := c.run("delete", "second"); code != 0 || !strings.Contains(out, "Deleting VM second") {
		t.Errorf("delete, answered yes: exit %d %q %q", code, out, errOut)
	}
	c.term = nil
	var op api.Operation
	decodeStrict(t, c.must("delete", "box", "--yes", "--wait", "--json"), &op)
	if op.Kind != "delete" || op.State != "done" {
		t.Errorf("delete --wait --json: %+v", op)
	}
	var dr api.OperationResponse
	decodeStrict(t, c.must("delete", "third", "--yes", "--json"), &dr)
	if dr.Operation.Kind != "delete" {
		t.Errorf("delete --json: %+v", dr)
	}
	waitFor(t, func() bool {
		decodeStrict(t, c.must("list", "--json"), &l)
		return len(l.Items) == 1 // the failed one
	})
	decodeStrict(t, c.must("list", "--json", "--all"), &l)
	if len(l.Items) != 4 {
		t.Errorf("list --all: %d VMs", len(l.Items))
	}
	if _, errOut, code := c.run("delete", "box", "--yes"); code != 1 || !strings.Contains(errOut, "Not found") {
		t.Errorf("delete again: exit %d %q", code, errOut)
	}

	// An admin sees the owners.
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	admin.must("create", "seat", "--name", "admins")
	if out := admin.must("list"); !strings.Contains(out, "OWNER") || !strings.Contains(out, "ann") {
		t.Errorf("admin list:\n%s", out)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A scripted server: the phases of create --wait, one per poll.
func TestCreateWaitPhases(t *testing.T) {
	script := []api.VM{
		{State: "queued", Phase: "waiting for a GPU"},
		{State: "queued", Phase: "waiting for a GPU", Reason: "no free mig capacity for 3g.40gb", QueuePosition: 2},
		{State: "allocating", Phase: "allocating GPU"},
		{State: "creating", Phase: "preparing disk"},
		{State: "running", Phase: "booting", Host: "gpu1", Console: &api.VMConsole{Protocol: "vnc"}},
		{State: "running", Phase: "ready", Host: "gpu1", GPUs: []api.VMGPU{{Address: "0000:41:00.0", Kind: "mig", Type: "3g.40gb"}},
			Addresses: []api.VMAddress{{IP: "192.0.2.7", Prefix: 24, Interface: "vnet0", Source: "lease"}, {IP: "2001:db8::7", Prefix: 64, Source: "agent"}},
			Console:   &api.VMConsole{Protocol: "vnc", TicketURL: "http://x/v1/vms/v1/console", VVURL: "http://x/v1/vms/v1/console.vv"}},
	}
	timedOut := script[5]
	timedOut.Addresses, timedOut.Reason = nil, "the guest reported no address within 5m"
	for _, tc := range []struct {
		name    string
		final   api.VM
		tty     bool
		code    int
		want    []string
		notWant []string
	}{
		{"plain", script[5], false, 0, []string{
			"Created VM box (v1) of profile seat",
			"queued: waiting for a GPU\n",
			"queued #2: waiting for a GPU (no free mig capacity for 3g.40gb)\n",
			"allocating: allocating GPU\ncreating: preparing disk\nrunning: booting\nrunning: ready\n",
			"VM box is running on gpu1.", "mig 3g.40gb",
			"  Addresses:  192.0.2.7/24 (lease, vnet0)\n              2001:db8::7/64 (agent)\n",
			"  Display:    gpuvm console box (VNC)\n", "  SSH:        gpuvm ssh box\n",
			"  Tunnel:     gpuvm tunnel box PORT (forwards a port of the guest to 127.0.0.1)\n"}, []string{"gpuvm rdp", "Remote desktop"}},
		{"terminal", script[5], true, 0, []string{"\r\x1b[K", "  running: booting\n", "  running: ready\n", "VM box is running on gpu1."}, nil},
		{"boot timeout", timedOut, false, 0, []string{"running: booting\nrunning: ready (the guest reported no address within 5m)\n",
			"  Addresses:  none reported by the guest", "gpuvm console box (VNC)"}, []string{"gpuvm ssh", "gpuvm rdp"}},
		{"fails", api.VM{State: "failed", Reason: "the image is missing"}, false, 1, []string{"allocating: allocating GPU\n", "failed: the image is missing\n"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			n := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				base := api.VM{ID: "v1", Name: "box", Owner: "ann", Profile: "seat", Hours: 2}
				switch {
				case r.Method == "POST" && r.URL.Path == "/v1/vms":
					base.State = "queued"
					w.WriteHeader(202)
					json.NewEncoder(w).Encode(api.CreateVMResponse{VM: base, Operation: api.Operation{ID: "o1", VMID: "v1", Kind: "create", State: "pending"}})
				case r.Method == "GET" && r.URL.Path == "/v1/vms/v1":
					s := append(append([]api.VM{}, script[:5]...), tc.final)
					vm := s[min(n, len(s)-1)]
					n++
					vm.ID, vm.Name, vm.Owner, vm.Profile, vm.Hours = base.ID, base.Name, base.Owner, base.Profile, base.Hours
					json.NewEncoder(w).Encode(vm)
				default:
					w.WriteHeader(404)
				}
			}))
			defer srv.Close()
			c := newCLI(t, map[string]string{"GPUVM_URL": srv.URL, "GPUVM_TOKEN": "t"})
			c.term = &terminal{in: strings.NewReader(""), outTTY: tc.tty}
			out, errOut, code := c.run("create", "seat", "--wait")
			if code != tc.code {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
			if !tc.tty && strings.Contains(out, "\r") {
				t.Errorf("spinner off a terminal: %q", out)
			}
			if tc.code == 1 && !strings.Contains(errOut, "VM box failed: the image is missing") {
				t.Errorf("stderr %q", errOut)
			}
		})
	}
}

func TestClientUsageAndConnectionErrors(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	env := clienttest.New(t, clienttest.Options{})
	key := filepath.Join(t.TempDir(), "id")
	os.WriteFile(key, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n"), 0o600)
	tests := []struct {
		name     string
		url, tok string
		args     []string
		code     int
		want     string
	}{
		{"create without profile", env.URL, env.UserToken, []string{"create"}, 2, "takes one profile name"},
		{"create two profiles", env.URL, env.UserToken, []string{"create", "a", "b"}, 2, "takes one profile name"},
		{"json and quiet", env.URL, env.UserToken, []string{"list", "--json", "--quiet"}, 2, "exclude each other"},
		{"all and state", env.URL, env.UserToken, []string{"list", "--all", "--state", "running"}, 2, "exclude each other"},
		{"negative hours", env.URL, env.UserToken, []string{"create", "seat", "--hours", "-1"}, 2, "--hours"},
		{"missing key file", env.URL, env.UserToken, []string{"create", "seat", "--ssh-key", "/nonexistent/k.pub"}, 2, "--ssh-key"},
		{"private key", env.URL, env.UserToken, []string{"create", "seat", "--ssh-key", key}, 2, "private key"},
		{"show without VM", env.URL, env.UserToken, []string{"show"}, 2, "one VM name or ID"},
		{"unknown flag", env.URL, env.UserToken, []string{"list", "--bogus"}, 2, "unknown flag"},
		{"profiles takes no args", env.URL, env.UserToken, []string{"profiles", "x"}, 2, "takes no arguments"},
		{"login without URL", "", "", []string{"login"}, 2, "the server's URL"},
		{"login bad URL", "", "", []string{"login", "ftp://x", "--token", "t"}, 2, "http or https"},
		{"bad URL", "ftp://x", "t", []string{"list"}, 2, "http or https"},
		{"no token", env.URL, "", []string{"list"}, 3, "refused the token"},
		{"bad token", env.URL, "nope", []string{"list"}, 3, "gpuvm login " + env.URL},
		{"bad token, admin", env.URL, "nope", []string{"admin", "gpus"}, 3, "refused the token"},
		{"unreachable", deadURL, "t", []string{"show", "box"}, 3, "cannot reach gpuvmd at " + deadURL},
		{"unreachable login", "", "", []string{"login", deadURL, "--token", "t"}, 3, "cannot reach"},
		{"no server", "", "", []string{"profiles"}, 3, "no server"},
		{"not an admin", env.URL, env.UserToken, []string{"admin", "gpus"}, 1, "Not allowed"},
		{"unknown state", env.URL, env.UserToken, []string{"list", "--state", "asleep"}, 1, `unknown state "asleep"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t, map[string]string{"GPUVM_URL": tc.url, "GPUVM_TOKEN": tc.tok})
			out, errOut, code := c.run(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d with %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}
}

func TestAdminCommands(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	c := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	out := c.must("admin", "gpus")
	if !strings.HasPrefix(out, "Host: test host  [SIMULATED") || !strings.Contains(out, "GPU 0000:41:00.0  H100  80GiB") {
		t.Errorf("admin gpus:\n%s", out)
	}
	var hi api.HostInventory
	decodeStrict(t, c.must("admin", "gpus", "--json"), &hi)
	if len(hi.GPUs) != 1 || !hi.Simulated {
		t.Errorf("admin gpus --json: %+v", hi)
	}
	out, errOut, code := c.run("admin", "reload")
	if code != 0 || !strings.HasPrefix(out, "Reloaded: ") || !strings.Contains(errOut, "Warning") {
		t.Errorf("reload: exit %d %q %q", code, out, errOut)
	}
	env.Config.Broken.Store(true)
	out, errOut, code = c.run("admin", "reload")
	if code != 1 || out != "" || !strings.Contains(errOut, "The configuration has errors") || !strings.Contains(errOut, `test.hcl:3:1: Error: Unsupported block type`) {
		t.Errorf("broken reload: exit %d %q %q", code, out, errOut)
	}
	// --url and --token work after admin too.
	c2 := newCLI(t, nil)
	c2.must("admin", "--url", env.URL, "--token", env.AdminToken, "gpus")
	c2.must("admin", "gpus", "--url", env.URL, "--token", env.AdminToken)
}

func TestCompletion(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Step: 5 * time.Millisecond})
	c := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	c.must("create", "seat", "--name", "alpha")
	c.must("create", "seat", "--name", "beta", "--wait")

	lines := func(out string) []string { return strings.Split(strings.TrimRight(out, "\n"), "\n") }
	out := c.must("__complete", "show", "")
	if got := lines(out); len(got) != 3 || !strings.HasPrefix(got[0], "alpha\t") || !strings.HasPrefix(got[1], "beta\trunning, seat") || got[2] != ":4" {
		t.Errorf("show: %q", got)
	}
	if got := lines(c.must("__complete", "delete", "b")); len(got) != 2 || !strings.HasPrefix(got[0], "beta\t") {
		t.Errorf("delete b: %q", got)
	}
	if got := lines(c.must("__complete", "create", "")); len(got) != 4 || !strings.HasPrefix(got[2], "seat\ta test seat") {
		t.Errorf("create: %q", got)
	}
	if got := lines(c.must("__complete", "show", "beta", "")); len(got) != 1 || got[0] != ":4" {
		t.Errorf("second argument: %q", got)
	}
	if got := lines(c.must("__complete", "list", "--state", "run")); !strings.Contains(strings.Join(got, " "), "running") {
		t.Errorf("--state: %q", got)
	}
	// --url and --token on the command line count.
	c2 := newCLI(t, nil)
	if got := lines(c2.must("__complete", "show", "--url", env.URL, "--token", env.UserToken, "")); len(got) != 3 {
		t.Errorf("with flags: %q", got)
	}
	// Silent when the server cannot be asked: no candidates, no message.
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	for _, bad := range []map[string]string{
		{"GPUVM_URL": deadURL, "GPUVM_TOKEN": "t"},
		{"GPUVM_URL": env.URL, "GPUVM_TOKEN": "wrong"},
		{},
	} {
		c := newCLI(t, bad)
		out, errOut, code := c.run("__complete", "show", "")
		if code != 0 || out != ":4\n" || strings.Contains(errOut, "gpuvm:") {
			t.Errorf("%v: exit %d %q %q", bad, code, out, errOut)
		}
	}
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		if out := c.must("completion", sh); !strings.Contains(out, "gpuvm") || len(out) < 500 {
			t.Errorf("completion %s: %q", sh, out)
		}
	}
	if _, _, code := c.run("completion", "tcsh"); code == 0 {
		t.Error("completion tcsh worked")
	}
}

// A refusal names whom to ask when the server's configuration does
// (server.contact); without it the words are as before.
func TestRefusalNamesContact(t *testing.T) {
	for _, c := range []struct {
		name, config, want string
	}{
		{"with a contact", clienttest.Profiles + "\nserver {\n  contact = \"Lab IT <gpu-help@example.org>\"\n}\n", "  Ask an admin (Lab IT <gpu-help@example.org>).\n"},
		{"without", clienttest.Profiles, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := clienttest.New(t, clienttest.Options{Profiles: c.config})
			cli := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
			_, errOut, code := cli.run("admin", "audit")
			if code != 1 || !strings.Contains(errOut, "gpuvm: Not allowed") {
				t.Fatalf("admin audit as a user: exit %d %q", code, errOut)
			}
			if got := strings.Contains(errOut, "Ask an admin"); got != (c.want != "") || (c.want != "" && !strings.HasSuffix(errOut, c.want)) {
				t.Errorf("stderr %q, want it to end %q", errOut, c.want)
			}
		})
	}
}
