package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func mkHome(t *testing.T, root, user string) string {
	t.Helper()
	dir := filepath.Join(root, user)
	if err := os.MkdirAll(filepath.Join(dir, "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "work", "notes.txt"), []byte("day"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A home is deleted only by its person or an admin, with the name typed
// again, never while a VM that mounts it may run; a symbolic link inside
// it is removed, not followed; hostile names are refused naming the field.
func TestDeleteHome(t *testing.T) {
	s, st := volumeServer(t)
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "homes")
	s.config().Server.Storage.Homes = config.Homes{Enabled: true, Root: root, Mount: "/gpuvm/home"}
	ann, bob := mkHome(t, root, "ann"), mkHome(t, root, "bob")
	// A file outside the homes that ann's home links to.
	outside := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(ann, "link")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, path, token string
		status            int
		field, detail     string
	}{
		{"another person's home", "/v1/homes/bob?confirm=bob", "ann-token", 404, "user", "no home of bob"},
		{"traversal", "/v1/homes/..?confirm=..", "admin-token", 422, "user", "not a person's name"},
		{"encoded traversal", "/v1/homes/%2e%2e?confirm=%2e%2e", "ann-token", 422, "user", "not a person's name"},
		{"no confirm", "/v1/homes/ann", "ann-token", 422, "confirm", "confirm=ann"},
		{"empty confirm", "/v1/homes/ann?confirm=", "ann-token", 422, "confirm", "confirm=ann"},
		{"wrong confirm", "/v1/homes/ann?confirm=bob", "ann-token", 422, "confirm", "not the person's name"},
		{"no home yet", "/v1/homes/cara?confirm=cara", "cara-token", 404, "user", "no home of cara"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, p, body := volCall(t, s, "DELETE", tc.path, tc.token, "")
			if code != tc.status || p.Field != tc.field || !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("%d %s", code, body)
			}
		})
	}
	for _, dir := range []string{ann, bob} {
		if _, err := os.Stat(filepath.Join(dir, "work", "notes.txt")); err != nil {
			t.Fatalf("a refused request removed %s: %v", dir, err)
		}
	}

	// A VM of ann that may mount the home (its profile is gone: it may).
	vm := &store.VM{Name: "box", Owner: "ann", Profile: "gone", Hours: 1}
	if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	if code, p, body := volCall(t, s, "DELETE", "/v1/homes/ann?confirm=ann", "ann-token", ""); code != http.StatusConflict || p.Field != "user" || !strings.Contains(p.Detail, "box (queued)") {
		t.Fatalf("with a queued VM: %d %s", code, body)
	}
	// Stopped, with its start under way (which makes the home, then
	// starts the domain on it): in use too.
	starting, err := st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMStopped, Phase: api.PhaseStarting})
	if err != nil {
		t.Fatal(err)
	}
	if code, p, body := volCall(t, s, "DELETE", "/v1/homes/ann?confirm=ann", "ann-token", ""); code != http.StatusConflict || p.Field != "user" || !strings.Contains(p.Detail, "box (starting)") {
		t.Fatalf("with a VM starting: %d %s", code, body)
	}
	if _, err := st.UpdateVMState(ctx, vm.ID, starting.Version, store.VMUpdate{State: store.VMStopped}); err != nil {
		t.Fatal(err)
	}
	// ann's home was made here, bob's recorded on another host.
	s.Host = "here"
	for user, host := range map[string]string{"ann": "here", "bob": "there"} {
		if _, err := st.RecordHomeHost(ctx, user, host); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, body := volCall(t, s, "DELETE", "/v1/homes/ann?confirm=ann", "ann-token", ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, body)
	}
	if _, err := os.Lstat(ann); !os.IsNotExist(err) {
		t.Fatalf("ann's home is still there: %v", err)
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "keep" {
		t.Fatalf("the link inside the home was followed: %q %v", b, err)
	}
	// An admin deletes bob's, audited as an override.
	if code, _, body := volCall(t, s, "DELETE", "/v1/homes/bob?confirm=bob", "admin-token", ""); code != http.StatusNoContent {
		t.Fatalf("admin delete: %d %s", code, body)
	}
	// ann's next home is made where her next VM runs; bob's home is still
	// recorded where it lives.
	if hosts, err := st.HomeHosts(ctx, []string{"ann", "bob"}); err != nil || hosts["ann"] != "" || hosts["bob"] != "there" {
		t.Fatalf("home hosts after the deletes here: %v, %v; want ann's forgotten, bob's kept on there", hosts, err)
	}
	entries, _, err := st.ListAudit(ctx, store.AuditFilter{Action: "home.delete"})
	if err != nil || len(entries) == 0 || entries[0].Target != "home/bob" || entries[0].User != "admin" || !strings.Contains(entries[0].Detail, "admin override") {
		t.Fatalf("audit: %+v %v", entries, err)
	}
	// A home that is a symbolic link is not removed.
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(root, "cara")); err != nil {
		t.Fatal(err)
	}
	if code, p, body := volCall(t, s, "DELETE", "/v1/homes/cara?confirm=cara", "cara-token", ""); code != http.StatusConflict || p.Field != "user" || !strings.Contains(p.Detail, "left alone") {
		t.Fatalf("a home that is a link: %d %s", code, body)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Fatalf("the linked directory went: %v", err)
	}
}

// GET /v1/homes: a person sees their own home, an admin every home with
// its directory; each with the node it lives on, when one is recorded
// (cara's lives on another node: none here).
func TestListHomes(t *testing.T) {
	s, st := volumeServer(t)
	for user, host := range map[string]string{"ann": "gpu-01", "cara": "gpu-02"} {
		if _, err := st.RecordHomeHost(context.Background(), user, host); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(t.TempDir(), "homes")
	mkHome(t, root, "ann")
	mkHome(t, root, "bob")
	// The homes' lock files, beside the homes: not a home.
	if _, err := homes.Ensure(context.Background(), root, "dan", 20000, 0, s.log, nil); err != nil {
		t.Fatal(err)
	}
	if err := homes.Remove(root, "dan", "dan", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, homes.LocksDir, "dan.lock")); err != nil {
		t.Fatal(err)
	}
	used := uint64(4096)
	s.HomeUsage = fakeHomeUsage{{Kind: api.VolumeHome, Owner: "ann", Name: "ann", UsedBytes: used, Enforcement: "none"}}
	if code, _, body := volCall(t, s, "GET", "/v1/homes", "ann-token", ""); code != http.StatusNotFound {
		t.Fatalf("homes off: %d %s", code, body)
	}
	s.config().Server.Storage.Homes = config.Homes{Enabled: true, Root: root, Mount: "/gpuvm/home"}
	list := func(token string) []api.Home {
		t.Helper()
		code, _, body := volCall(t, s, "GET", "/v1/homes", token, "")
		var l api.HomeList
		if code != http.StatusOK || json.Unmarshal(body, &l) != nil {
			t.Fatalf("list: %d %s", code, body)
		}
		return l.Homes
	}
	if h := list("ann-token"); len(h) != 1 || h[0].User != "ann" || !h[0].Exists || h[0].Dir != "" || h[0].UsedBytes == nil || *h[0].UsedBytes != used || h[0].HomeHost != "gpu-01" {
		t.Errorf("ann: %+v", h)
	}
	if h := list("cara-token"); len(h) != 1 || h[0].User != "cara" || h[0].Exists || h[0].HomeHost != "gpu-02" {
		t.Errorf("cara: %+v", h)
	}
	if h := list("admin-token"); len(h) != 2 || h[0].User != "ann" || h[0].HomeHost != "gpu-01" || h[1].User != "bob" || h[1].Dir != filepath.Join(root, "bob") || h[1].HomeHost != "" {
		t.Errorf("admin: %+v", h)
	}
}

// A VM whose profile mounts its owner's home is read with the node that
// home lives on and whether it is on another (in GET /v1/vms/{id} and in
// the list); a VM that mounts no home, or whose owner has none yet, is
// read without.
func TestVMHomeHost(t *testing.T) {
	s, st := volumeServer(t)
	ctx := context.Background()
	cfg := s.config()
	cfg.Server.Storage.Homes = config.Homes{Enabled: true, Root: filepath.Join(t.TempDir(), "homes"), Mount: "/gpuvm/home"}
	cfg.Profiles["seat"].Home = true // "whole" mounts none
	if _, err := st.RecordHomeHost(ctx, "ann", "n1"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, owner, profile, host string
		wantHome                   string
		wantAway                   bool
	}{
		{"at-home", "ann", "seat", "n1", "n1", false},
		{"away", "ann", "seat", "n2", "n1", true},
		{"queued", "ann", "seat", "", "n1", false},
		{"no-home-mount", "ann", "whole", "n2", "", false},
		{"no-home-yet", "bob", "seat", "n2", "", false},
	}
	ids := map[string]string{}
	for _, c := range cases {
		vm := &store.VM{Name: c.name, Owner: c.owner, Profile: c.profile, Hours: 1}
		if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: c.owner}); err != nil {
			t.Fatal(err)
		}
		if c.host != "" {
			host := c.host
			if _, err := st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: api.PhaseReady, Host: &host}); err != nil {
				t.Fatal(err)
			}
		}
		ids[c.name] = vm.ID
	}
	code, _, body := volCall(t, s, "GET", "/v1/vms", "admin-token", "")
	var list api.VMList
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
		t.Fatalf("list: %d %s", code, body)
	}
	listed := map[string]api.VM{}
	for _, vm := range list.Items {
		listed[vm.Name] = vm
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := volCall(t, s, "GET", "/v1/vms/"+ids[c.name], "admin-token", "")
			var one api.VM
			if code != http.StatusOK || json.Unmarshal(body, &one) != nil {
				t.Fatalf("get: %d %s", code, body)
			}
			for how, vm := range map[string]api.VM{"read": one, "listed": listed[c.name]} {
				if vm.HomeHost != c.wantHome || vm.AwayFromHome != c.wantAway {
					t.Errorf("%s: home_host %q, away_from_home %v; want %q, %v", how, vm.HomeHost, vm.AwayFromHome, c.wantHome, c.wantAway)
				}
			}
			if c.wantHome == "" && strings.Contains(string(body), "home_host") {
				t.Errorf("a VM without a home host says home_host: %s", body)
			}
		})
	}
	// Homes turned off: no VM mounts one.
	cfg.Server.Storage.Homes.Enabled = false
	if code, _, body := volCall(t, s, "GET", "/v1/vms/"+ids["away"], "admin-token", ""); code != http.StatusOK || strings.Contains(string(body), "home_host") {
		t.Errorf("homes off: %d %s", code, body)
	}
}

// forgetProbe is a store whose ForgetHomeHost says whether the home was
// held when it was called: a removal of the home that comes then waits.
type forgetProbe struct {
	Store
	root         string
	called, held bool
}

var errProbe = errors.New("probe: nothing is removed")

func (p *forgetProbe) ForgetHomeHost(ctx context.Context, user, host string) error {
	p.called = true
	tried := make(chan struct{})
	go func() {
		_ = homes.Remove(p.root, user, user, func() error { return errProbe }, nil)
		close(tried)
	}()
	select {
	case <-tried:
	case <-time.After(200 * time.Millisecond):
		p.held = true
	}
	return p.Store.ForgetHomeHost(ctx, user, host)
}

// Where a deleted home lived is forgotten while the home is still held, as
// a VM's start records it: a start that makes the home again meanwhile
// records it after the forgetting, not before.
func TestDeleteHomeForgetsWithTheHomeHeld(t *testing.T) {
	s, st := volumeServer(t)
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "homes")
	s.config().Server.Storage.Homes = config.Homes{Enabled: true, Root: root, Mount: "/gpuvm/home"}
	mkHome(t, root, "ann")
	s.Host = "here"
	if _, err := st.RecordHomeHost(ctx, "ann", "here"); err != nil {
		t.Fatal(err)
	}
	probe := &forgetProbe{Store: s.Store, root: root}
	s.Store = probe
	if code, _, body := volCall(t, s, "DELETE", "/v1/homes/ann?confirm=ann", "ann-token", ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, body)
	}
	if !probe.called || !probe.held {
		t.Errorf("ForgetHomeHost called %v, with the home held %v; want called with it held", probe.called, probe.held)
	}
	if hosts, err := st.HomeHosts(ctx, []string{"ann"}); err != nil || hosts["ann"] != "" {
		t.Errorf("ann's home host after the delete: %v, %v; want none", hosts, err)
	}
}
