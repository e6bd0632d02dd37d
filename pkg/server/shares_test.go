package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// shareServer has shares "team" (rw ann, ro group ml: bob) and "lab" (ro
// ann; its directory is missing), and profile "seat" that mounts none
// and "team-seat" that mounts team always.
func shareServer(t *testing.T) *Server {
	t.Helper()
	team := t.TempDir()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(`
server {
  storage {
    share "team" {
      path        = "` + team + `"
      description = "the team's dataset"
      read_write  = ["user:ann"]
      read_only   = ["group:ml"]
      quota       = "500GiB"
    }
    share "lab" {
      path      = "/nonexistent/gpuvm-test/lab"
      read_only = ["user:ann"]
    }
  }
}
policy {
  group "ml" {}
}
profile "seat" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
profile "team-seat" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  users  = ["ann", "cy"]
  shares = ["team"]
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	st := storetest.New(t)
	users := fakeAuth{"admin-token": {Name: "admin", Admin: true}, "ann-token": {Name: "ann"}, "bob-token": {Name: "bob", Groups: []string{"ml"}},
		"cy-token": {Name: "cy"}}
	ctx := context.Background()
	for _, u := range users {
		if err := st.CreateUser(ctx, &store.User{Name: u.Name, Admin: u.Admin}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetUserGroups(ctx, "bob", []string{"ml"}); err != nil {
		t.Fatal(err)
	}
	return newServer(t, Deps{Auth: users, Backends: fakeBackends{}, Config: &fakeConfig{cfg: cfg}, Store: st, Worker: &countWaker{}})
}

// A VM's shares: hostile or unknown names are refused naming the field
// and make nothing; a share the caller may not mount is 403 naming it.
func TestCreateVMShares(t *testing.T) {
	s := shareServer(t)
	for _, tc := range []struct {
		name, token, body string
		status            int
		field, detail     string
	}{
		{"traversal", "ann-token", `{"profile":"seat","shares":["../etc"]}`, 422, "shares[0]", "share name"},
		{"nul", "ann-token", `{"profile":"seat","shares":["team","a\u0000b"]}`, 422, "shares[1]", "share name"},
		{"300 characters", "ann-token", `{"profile":"seat","shares":["` + strings.Repeat("a", 300) + `"]}`, 422, "shares[0]", "share name"},
		{"unicode", "ann-token", `{"profile":"seat","shares":["dätä"]}`, 422, "shares[0]", "share name"},
		{"empty", "ann-token", `{"profile":"seat","shares":[""]}`, 422, "shares[0]", "share name"},
		{"unknown", "ann-token", `{"profile":"seat","shares":["team","nope"]}`, 422, "shares[1]", `unknown share "nope"`},
		{"twice", "ann-token", `{"profile":"seat","shares":["team","team"]}`, 422, "shares[1]", "named twice"},
		{"too many", "ann-token", `{"profile":"seat","shares":[` + strings.Repeat(`"team",`, 16) + `"team"]}`, 422, "shares", "at most 16"},
		{"not a list", "ann-token", `{"profile":"seat","shares":"team"}`, 400, "", ""},
		{"no access", "cy-token", `{"profile":"seat","shares":["team"]}`, 403, "shares[0]", "share team"},
		{"profile's share, no access", "cy-token", `{"profile":"team-seat"}`, 403, "shares", "profile team-seat mounts it always"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, body := send(t, s, "POST", "/v1/vms", tc.token, tc.body)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.field != "" && (body["field"] != tc.field || !strings.Contains(body["detail"].(string), tc.detail)) {
				t.Errorf("problem %v: want field %q, detail with %q", body, tc.field, tc.detail)
			}
		})
	}
	rec, body := send(t, s, "GET", "/v1/vms", "admin-token", "")
	if rec.Code != 200 || len(body["items"].([]any)) != 0 {
		t.Fatalf("after refusals: %d %s, want no VM", rec.Code, rec.Body)
	}

	// ann asks for team in a profile without it, read-write; bob (group
	// ml) too, read-only.
	created := createBox(t, s, "ann-token", `{"profile":"seat","shares":["team"]}`)
	rec, _ = send(t, s, "GET", "/v1/vms/"+created.VM.ID, "ann-token", "")
	var vm api.VM
	if err := json.Unmarshal(rec.Body.Bytes(), &vm); err != nil || rec.Code != 200 {
		t.Fatal(rec.Code, err)
	}
	if len(vm.Shares) != 1 || vm.Shares[0] != (api.VMShare{Name: "team", Mode: "rw", Mount: "/gpuvm/shares/team"}) {
		t.Errorf("ann's VM shares %+v", vm.Shares)
	}
	if vm.Capabilities == nil || vm.Capabilities.MemorySnapshot.Can || !strings.Contains(vm.Capabilities.MemorySnapshot.Reason, "virtiofs") {
		t.Errorf("ann's VM capabilities %+v: want no memory snapshot, for virtiofs", vm.Capabilities)
	}
	created = createBox(t, s, "bob-token", `{"profile":"seat","shares":["team"]}`)
	rec, _ = send(t, s, "GET", "/v1/vms/"+created.VM.ID, "bob-token", "")
	vm = api.VM{}
	_ = json.Unmarshal(rec.Body.Bytes(), &vm)
	if len(vm.Shares) != 1 || vm.Shares[0].Mode != "ro" || vm.Shares[0].Enforcement == "" {
		t.Errorf("bob's VM shares %+v: want team ro, with its enforcement", vm.Shares)
	}
}

// GET /v1/shares lists the caller's shares with their mode; an admin's
// lists all, with their host paths; another person's share is not seen.
func TestListShares(t *testing.T) {
	s := shareServer(t)
	list := func(token string) map[string]api.Share {
		t.Helper()
		rec, _ := send(t, s, "GET", "/v1/shares", token, "")
		var l api.ShareList
		if err := json.Unmarshal(rec.Body.Bytes(), &l); rec.Code != 200 || err != nil {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		out := map[string]api.Share{}
		for _, sh := range l.Shares {
			out[sh.Name] = sh
		}
		return out
	}
	ann := list("ann-token")
	if len(ann) != 2 || ann["team"].Mode != "rw" || ann["team"].Rule != "read_write: user:ann" || !ann["team"].Available || ann["team"].Path != "" ||
		ann["team"].Description != "the team's dataset" {
		t.Errorf("ann's team %+v", ann["team"])
	}
	if lab := ann["lab"]; lab.Mode != "ro" || lab.Available || !strings.Contains(lab.Unavailable, "/nonexistent/gpuvm-test/lab") {
		t.Errorf("ann's lab %+v: want ro, unavailable naming its directory", lab)
	}
	if bob := list("bob-token"); len(bob) != 1 || bob["team"].Mode != "ro" || bob["team"].Rule != "read_only: group:ml" {
		t.Errorf("bob's shares %+v", bob)
	}
	if cy := list("cy-token"); len(cy) != 0 {
		t.Errorf("cy sees %+v, want none", cy)
	}
	if admin := list("admin-token"); len(admin) != 2 || admin["team"].Mode != "" || admin["team"].Path == "" {
		t.Errorf("admin's shares %+v", admin)
	}
	// The quota, and what the quotas last read: nothing before a reading;
	// the homes' rows are not the share's.
	if q := ann["team"].QuotaBytes; q == nil || *q != 500<<30 || ann["team"].UsedBytes != nil || ann["lab"].QuotaBytes != nil {
		t.Errorf("before a reading: team %+v, lab %+v", ann["team"], ann["lab"])
	}
	s.HomeUsage = fakeHomeUsage{
		{Kind: api.VolumeHome, Owner: "ann", Name: "team", UsedBytes: 1},
		{Kind: api.VolumeShare, Name: "team", UsedBytes: 7 << 30, Enforcement: "none", Note: "the files of share team at … are on tmpfs"},
	}
	if team := list("bob-token")["team"]; team.UsedBytes == nil || *team.UsedBytes != 7<<30 || team.QuotaEnforcement != "none" ||
		!strings.HasPrefix(team.QuotaNote, "the files of share team") {
		t.Errorf("after a reading: %+v", team)
	}
}
