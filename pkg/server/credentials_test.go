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
	rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"desk"}`)
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

	rec, _ = send(t, s, "POST", "/v1/vms/desk/credentials", "ann-token", "")
	var got api.CredentialsResponse
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &got) != nil || got.User != "ann" || len(got.Password) != 20 || got.VMID != id {
		t.Fatalf("owner's read: %d %s", rec.Code, rec.Body)
	}
	if rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", rec.Header().Get("Cache-Control"))
	}
	rec, body = send(t, s, "POST", "/v1/vms/"+id+"/credentials", "ann-token", "")
	if rec.Code != 410 || body["type"] != api.ProblemBase+"credentials-read" || !strings.Contains(body["detail"].(string), "already read") {
		t.Fatalf("second read: %d %s", rec.Code, rec.Body)
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
