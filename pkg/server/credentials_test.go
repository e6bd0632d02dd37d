package server

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The desktop password: made at create, only its hash in the seed's view,
// read once by the owner, never by an admin or another user, never in the
// VM's JSON, its events or the audit log; every read audited.
func TestCredentialsOnce(t *testing.T) {
	s, st, _ := vmServer(t)
	ctx := context.Background()
	rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"desk","name":"desk"}`)
	if rec.Code != 202 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	id := body["vm"].(map[string]any)["id"].(string)
	cr, err := st.GetVMCredential(ctx, id)
	if err != nil || cr.Login != "ann" || !strings.HasPrefix(cr.PasswordHash, "$6$") {
		t.Fatalf("stored credential %+v, %v", cr, err)
	}

	for _, tc := range []struct{ who, token, problem string }{
		{"an admin", "admin-token", "forbidden"},
		{"another user", "bob-token", "not-found"},
	} {
		rec, body := send(t, s, "POST", "/v1/vms/"+id+"/credentials", tc.token, "")
		if body["type"] != api.ProblemBase+tc.problem || strings.Contains(rec.Body.String(), "password\":") {
			t.Errorf("%s reads it: %d %s", tc.who, rec.Code, rec.Body)
		}
	}

	// Offered until read, in GET and in lists.
	for _, path := range []string{"/v1/vms/" + id, "/v1/vms"} {
		if acc := accessIn(t, s, path, id); !acc.Password || acc.PasswordReadAt != nil {
			t.Errorf("GET %s before the read: access %+v", path, acc)
		}
	}
	rec, _ = send(t, s, "POST", "/v1/vms/desk/credentials", "ann-token", "")
	var got api.CredentialsResponse
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &got) != nil || got.User != "ann" || len(got.Password) != 20 || got.VMID != id {
		t.Fatalf("owner's read: %d %s", rec.Code, rec.Body)
	}
	if rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", rec.Header().Get("Cache-Control"))
	}
	rec, body = send(t, s, "POST", "/v1/vms/"+id+"/credentials", "ann-token", "")
	if rec.Code != 410 || body["type"] != api.ProblemBase+"credentials-read" || !strings.Contains(body["title"].(string), "already read") ||
		!strings.Contains(body["detail"].(string), "gpuvm ssh desk, then passwd") {
		t.Fatalf("second read: %d %s", rec.Code, rec.Body)
	}
	// When, for a client to write in its reader's zone.
	var p api.Problem
	if json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.ReadAt == nil || !p.ReadAt.Equal(got.ReadAt) {
		t.Errorf("second read's read_at: %s, want %s", rec.Body, got.ReadAt)
	}

	// Read: no longer offered, and when it was read is said.
	for _, path := range []string{"/v1/vms/" + id, "/v1/vms"} {
		if acc := accessIn(t, s, path, id); acc.Password || acc.PasswordReadAt == nil || !acc.PasswordReadAt.Equal(got.ReadAt) {
			t.Errorf("GET %s after the read: access %+v, want password false, read at %s", path, acc, got.ReadAt)
		}
	}

	// The password is nowhere else.
	pw := []byte(got.Password)
	for _, path := range []string{"/v1/vms/" + id, "/v1/vms"} {
		if rec, _ := send(t, s, "GET", path, "ann-token", ""); bytes.Contains(rec.Body.Bytes(), pw) || bytes.Contains(rec.Body.Bytes(), []byte(cr.PasswordHash)) {
			t.Errorf("GET %s shows the password or its hash", path)
		}
	}
	evs, err := st.ListEventsSince(ctx, 0, store.EventFilter{VMID: id})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(evs)
	if bytes.Contains(raw, pw) {
		t.Errorf("an event has the password")
	}
	entries, _, err := st.ListAudit(ctx, store.AuditFilter{Action: "vm.credentials"})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = json.Marshal(entries)
	if bytes.Contains(raw, pw) {
		t.Errorf("the audit log has the password")
	}
	outcomes := map[string]int{}
	for _, e := range entries {
		if e.VMID != id && e.User != "bob" { // bob does not see the VM: his 404 names none
			t.Errorf("audit entry of vm %q", e.VMID)
		}
		outcomes[e.User+" "+e.Outcome]++
	}
	if len(entries) != 4 || outcomes["ann "+store.AuditOK] != 1 {
		t.Errorf("audit entries %+v", entries)
	}
}

// What a VM offers follows its profile, in lists and in GET: a tiny guest
// (a display, a network, a template without password_hash) offers the
// console and SSH, no desktop and no password; gpuvmd makes it none, and
// asking for one is 409, naming what reaches it instead.
func TestVMAccessAndNoPassword(t *testing.T) {
	s, st, _ := vmServer(t)
	ctx := context.Background()
	ids := map[string]string{}
	for _, p := range []string{"desk", "tiny", "headless", "seat"} {
		rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"`+p+`","name":"`+p+`"}`)
		if rec.Code != 202 {
			t.Fatalf("create %s: %d %s", p, rec.Code, rec.Body)
		}
		vm := body["vm"].(map[string]any)
		ids[p] = vm["id"].(string)
		if vm["access"] == nil {
			t.Errorf("create %s: no access in %s", p, rec.Body)
		}
	}
	want := map[string]api.VMAccess{
		"desk":     {Desktop: "vnc", Console: "vnc", SSH: true, Tunnels: true, Password: true},
		"tiny":     {Console: "vnc", SSH: true, Tunnels: true},
		"headless": {},
		"seat":     {Console: "vnc", SSH: true, Tunnels: true},
	}
	rec, _ := send(t, s, "GET", "/v1/vms", "ann-token", "")
	var list api.VMList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Items) != 4 {
		t.Fatalf("list: %s", rec.Body)
	}
	for _, vm := range list.Items {
		if vm.Access == nil || *vm.Access != want[vm.Name] {
			t.Errorf("list: %s offers %+v, want %+v", vm.Name, vm.Access, want[vm.Name])
		}
		rec, _ := send(t, s, "GET", "/v1/vms/"+vm.ID, "ann-token", "")
		var one api.VM
		if json.Unmarshal(rec.Body.Bytes(), &one) != nil || one.Access == nil || *one.Access != want[vm.Name] {
			t.Errorf("GET %s: %s", vm.Name, rec.Body)
		}
	}
	for name, id := range ids {
		_, err := st.GetVMCredential(ctx, id)
		if made := err == nil; made != want[name].Password {
			t.Errorf("%s: a credential made %v, want %v (%v)", name, made, want[name].Password, err)
		}
	}
	for _, tc := range []struct{ vm, says string }{
		{"tiny", "reach it with gpuvm console tiny or gpuvm ssh tiny"},
		{"headless", `profile headless makes no one-time password for VM "headless"`},
	} {
		rec, body := send(t, s, "POST", "/v1/vms/"+tc.vm+"/credentials", "ann-token", "")
		if rec.Code != 409 || body["type"] != api.ProblemBase+"no-password" || !strings.Contains(body["detail"].(string), tc.says) {
			t.Errorf("credentials of %s: %d %s, want 409 saying %q", tc.vm, rec.Code, rec.Body, tc.says)
		}
	}
}

// An admin's GET /v1/vms is everybody's, with owners; ?owner= keeps one
// person's (the portal's My VMs asks for the admin's own); a user's
// ?owner= of another is ignored: always their own.
func TestListVMsOwnerFilter(t *testing.T) {
	s, _, _ := vmServer(t)
	for _, c := range []struct{ token, name string }{{"ann-token", "a1"}, {"bob-token", "b1"}, {"admin-token", "own"}} {
		if rec, _ := send(t, s, "POST", "/v1/vms", c.token, `{"profile":"seat","name":"`+c.name+`"}`); rec.Code != 202 {
			t.Fatalf("create %s: %d %s", c.name, rec.Code, rec.Body)
		}
	}
	names := func(token, query string) string {
		rec, _ := send(t, s, "GET", "/v1/vms"+query, token, "")
		var list api.VMList
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &list) != nil {
			t.Fatalf("list %s: %d %s", query, rec.Code, rec.Body)
		}
		var out []string
		for _, vm := range list.Items {
			out = append(out, vm.Owner+"/"+vm.Name)
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct{ token, query, want string }{
		{"admin-token", "", "ann/a1 bob/b1 admin/own"},
		{"admin-token", "?owner=admin", "admin/own"},
		{"admin-token", "?owner=bob", "bob/b1"},
		{"ann-token", "", "ann/a1"},
		{"ann-token", "?owner=bob", "ann/a1"},
	} {
		if got := names(tc.token, tc.query); got != tc.want {
			t.Errorf("%s GET /v1/vms%s: %q, want %q", tc.token, tc.query, got, tc.want)
		}
	}
}

// accessIn is the access of VM id in the answer to GET path (one VM, or a
// list of them), as its owner ann reads it.
func accessIn(t *testing.T, s *Server, path, id string) api.VMAccess {
	t.Helper()
	rec, _ := send(t, s, "GET", path, "ann-token", "")
	var one api.VM
	var list api.VMList
	if json.Unmarshal(rec.Body.Bytes(), &list) == nil && len(list.Items) > 0 {
		for _, vm := range list.Items {
			if vm.ID == id {
				one = vm
			}
		}
	} else if err := json.Unmarshal(rec.Body.Bytes(), &one); err != nil {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	if one.Access == nil {
		t.Fatalf("GET %s: no access for %s: %s", path, id, rec.Body)
	}
	return *one.Access
}
