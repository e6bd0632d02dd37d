package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/test/testbin"
)

var pluginDir string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, cleanup, err := testbin.Plugins()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cleanup()
		pluginDir = dir
		return m.Run()
	}())
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

const devServer = `server {
  state_dir = "state"
  host { simulate = "l40sx4" }
}
`

const devProfile = `profile "seat" {
  vcpus  = 2
  memory = "4GiB"
  boot { kernel = "/boot/vmlinuz" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
}
`

// gpuvmd starts from a configuration directory, serves the simulated host's
// inventory, and on SIGHUP takes a clean new set but refuses a broken one,
// keeping the old in force.
func TestServeConfigAndReload(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("server.hcl", devServer)
	write("profiles.hcl", devProfile)
	ctx, cancel := context.WithCancel(context.Background())
	addr, errc, logs := serveConfig(t, ctx, dir)
	token, err := os.ReadFile(filepath.Join(dir, "state", "admin.token"))
	if err != nil {
		t.Fatalf("first start wrote no admin token: %v", err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "state", "admin.token")); fi.Mode().Perm() != 0o600 {
		t.Errorf("admin.token mode %v, want 0600", fi.Mode().Perm())
	}
	bearer = strings.TrimSpace(string(token))
	var hi api.HostInventory
	getJSON(t, "http://"+addr+"/v1/gpus", &hi)
	if !hi.Simulated || len(hi.GPUs) != 4 || !strings.Contains(hi.Host, "l40sx4") {
		t.Fatalf("inventory: simulated=%v gpus=%d host=%q", hi.Simulated, len(hi.GPUs), hi.Host)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "sim-l40sx4", "state.json")); err != nil {
		t.Errorf("state_dir from the file was not used: %v", err)
	}
	// It registered itself as a host, with its URL and inventory.
	var hosts api.HostList
	getJSON(t, "http://"+addr+"/v1/hosts", &hosts)
	if len(hosts.Items) != 1 || hosts.Items[0].State != "up" || hosts.Items[0].APIURL != "http://"+addr || hosts.Items[0].GPUs != 4 ||
		hosts.Items[0].Version != version || !hosts.Items[0].Simulated {
		t.Errorf("hosts: %+v", hosts.Items)
	}
	ready := map[string]string{}
	getJSON(t, "http://"+addr+"/readyz", &ready)
	if !strings.Contains(ready["config"], "1 profiles") {
		t.Errorf("readyz config = %q", ready["config"])
	}
	// A broken set is refused whole, by SIGHUP and by the API.
	write("profiles.hcl", devProfile+"\nprofile \"seat2\" {\n  memroy = \"1GiB\"\n}\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, logs, "configuration reload refused")
	var problem map[string]any
	if code := postJSON(t, "http://"+addr+"/v1/admin/reload", &problem); code != http.StatusUnprocessableEntity ||
		!strings.Contains(fmt.Sprint(problem["diagnostics"]), "memroy") {
		t.Errorf("POST /v1/admin/reload of a broken set: %d %v", code, problem)
	}
	// The same diagnostics one by one, the misspelt argument at its file
	// and line.
	var at []string
	for _, d := range problem["config_diagnostics"].([]any) {
		d := d.(map[string]any)
		if strings.Contains(fmt.Sprint(d["summary"], d["detail"]), "memroy") {
			at = append(at, fmt.Sprintf("%s %s:%v:%v", d["severity"], filepath.Base(fmt.Sprint(d["file"])), d["line"], d["column"]))
		}
	}
	if want := fmt.Sprintf("error profiles.hcl:%d:3", strings.Count(devProfile, "\n")+3); len(at) != 1 || at[0] != want {
		t.Errorf("config_diagnostics of memroy: %v, want %s (%v)", at, want, problem["config_diagnostics"])
	}
	getJSON(t, "http://"+addr+"/readyz", &ready)
	if !strings.Contains(ready["config"], "1 profiles") {
		t.Errorf("after a refused reload: %q", ready["config"])
	}
	// A clean one replaces it.
	write("profiles.hcl", devProfile+strings.Replace(devProfile, `"seat"`, `"seat2"`, 1))
	var ok map[string]any
	if code := postJSON(t, "http://"+addr+"/v1/admin/reload", &ok); code != http.StatusOK {
		t.Errorf("POST /v1/admin/reload: %d %v", code, ok)
	}
	getJSON(t, "http://"+addr+"/readyz", &ready)
	if !strings.Contains(ready["config"], "2 profiles") {
		t.Errorf("after a clean reload: %q", ready["config"])
	}
	// Every reload is in the audit log — the API's and SIGHUP's — and in
	// the log (server.audit.log is on by default).
	var audit api.AuditList
	getJSON(t, "http://"+addr+"/v1/admin/audit?action=config.", &audit)
	if len(audit.Items) != 3 || audit.Items[0].Outcome != api.AuditOK || audit.Items[1].Outcome != api.AuditRefused ||
		audit.Items[1].Status != http.StatusUnprocessableEntity || audit.Items[0].User != "admin" || audit.Items[0].Source != "127.0.0.1" {
		t.Errorf("audit log: %+v", audit)
	} else if sig := audit.Items[2]; sig.Source != "SIGHUP" || sig.Outcome != api.AuditRefused || sig.User != "" || !strings.Contains(sig.Detail, "has errors") {
		t.Errorf("the SIGHUP reload: %+v", sig)
	}
	if !strings.Contains(logs.String(), "msg=audit") || !strings.Contains(logs.String(), "action=config.reload") {
		t.Errorf("no audit line in the log:\n%s", logs.String())
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func TestRefusesBrokenConfigAtStart(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x.hcl"), []byte("serverr {}\n"), 0o644)
	var logs syncBuf
	err := runWithReady(context.Background(), []string{"--config", dir, "--plugin-dir", pluginDir}, &logs, nil)
	if err == nil || !strings.Contains(err.Error(), "has errors") || !strings.Contains(logs.String(), "x.hcl:1:1") {
		t.Fatalf("err = %v\n%s", err, logs.String())
	}
}

var bearer string

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

func waitFor(t *testing.T, logs *syncBuf, text string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log:\n%s", text, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func postJSON(t *testing.T, url string, v any) int {
	t.Helper()
	req, _ := http.NewRequest("POST", url, nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return resp.StatusCode
}

// A VM asked for over REST reaches running on the simulated host, and is
// deleted again.
func TestVMOverREST(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "server.hcl"), []byte(devServer), 0o644)
	os.WriteFile(filepath.Join(dir, "profiles.hcl"), []byte(devProfile), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, errc, logs := serveConfig(t, ctx, dir)
	token, _ := os.ReadFile(filepath.Join(dir, "state", "admin.token"))
	auth := "Bearer " + strings.TrimSpace(string(token))
	do := func(method, path, body string, v any) int {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(v)
		return resp.StatusCode
	}
	var created api.CreateVMResponse
	if code := do("POST", "/v1/vms", `{"profile":"seat","name":"desk"}`, &created); code != 202 {
		t.Fatalf("POST /v1/vms: %d %+v\n%s", code, created, logs.String())
	}
	var vm api.VM
	deadline := time.Now().Add(30 * time.Second)
	for vm.State != "running" {
		if time.Now().After(deadline) {
			t.Fatalf("VM %+v\n%s", vm, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
		do("GET", "/v1/vms/desk", "", &vm)
	}
	if len(vm.GPUs) != 1 || vm.GPUs[0].Type != "L40S-12Q" || vm.GPUs[0].Device == "" {
		t.Errorf("GPUs %+v", vm.GPUs)
	}
	// libvirt's test driver runs no guest: nothing to wait for.
	if vm.Phase != "ready" || vm.Reason != "" || !strings.Contains(logs.String(), "test driver runs no guest") {
		t.Errorf("phase %q reason %q on the test driver", vm.Phase, vm.Reason)
	}
	var del api.OperationResponse
	if code := do("DELETE", "/v1/vms/desk", "", &del); code != 202 {
		t.Fatalf("DELETE: %d", code)
	}
	var op api.Operation
	for op.State != "done" {
		if time.Now().After(deadline) {
			t.Fatalf("delete %+v\n%s", op, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
		do("GET", "/v1/operations/"+del.Operation.ID, "", &op)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// serveConfig runs gpuvmd on the configuration directory dir (an
// ephemeral port, libvirt's test driver) until ctx ends, and waits until
// it serves: its address, where its run's error comes, and its log.
func serveConfig(t *testing.T, ctx context.Context, dir string) (string, <-chan error, *syncBuf) {
	t.Helper()
	addrc := make(chan string, 1)
	logs := &syncBuf{}
	errc := make(chan error, 1)
	go func() {
		o := []string{"--config", dir, "--listen", "127.0.0.1:0", "--plugin-dir", pluginDir, "--libvirt-uri", "test:///default"}
		errc <- runWithReady(ctx, o, logs, func(a string) { addrc <- a })
	}()
	select {
	case addr := <-addrc:
		return addr, errc, logs
	case err := <-errc:
		t.Fatalf("gpuvmd exited: %v\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("gpuvmd not ready\n%s", logs.String())
	}
	return "", nil, nil
}
