package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/logtest"

	"github.com/coder/websocket"
	"github.com/gin-gonic/gin"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// Every state-changing route of the API (all but GET; the OpenAPI route
// list, which a test holds to what gin serves) has an audit action, and so
// have the GETs that hand out or open a console or tunnel. A route added
// without one fails here.
func TestAuditCoversStateChangingRoutes(t *testing.T) {
	mustAudit := getsThatAreNotReads
	for key := range mustAudit {
		if !strings.HasPrefix(key, "GET ") {
			t.Errorf("getsThatAreNotReads has %s, which is not a GET", key)
		}
	}
	for _, r := range apiRoutes {
		key := r.Method + " " + r.Path
		a, ok := auditRoutes[key]
		switch {
		case (stateChanging(r.Method) || mustAudit[key] != "") && !ok:
			t.Errorf("%s changes state or opens a VM but has no audit action: add it to auditRoutes (audit.go)", key)
		case !stateChanging(r.Method) && mustAudit[key] == "" && ok:
			t.Errorf("%s is a read, yet auditRoutes records it as %s", key, a.Action)
		}
	}
	// The table's own rules: "kind.verb" names, each once; targets name
	// only the route's parameters.
	seen := map[string]string{}
	for key, a := range auditRoutes {
		if !regexp.MustCompile(`^[a-z]+\.[a-z]+$`).MatchString(a.Action) {
			t.Errorf("%s: action %q is not kind.verb", key, a.Action)
		}
		if other, dup := seen[a.Action]; dup {
			t.Errorf("action %s is both %s and %s", a.Action, key, other)
		}
		seen[a.Action] = key
		_, path, _ := strings.Cut(key, " ")
		for _, m := range targetParam.FindAllStringSubmatch(a.Target, -1) {
			if !strings.Contains(path, "{"+m[1]+"}") {
				t.Errorf("%s: target %q names {%s}, which the path has not", key, a.Target, m[1])
			}
		}
	}
	// And the middleware finds every one the engine serves.
	s := testServer(t, nil)
	for _, r := range s.engine.Routes() {
		key := r.Method + " " + ginPathParam.ReplaceAllString(r.Path, "{$1}")
		if _, want := auditRoutes[key]; want {
			if _, ok := s.audited[r.Method+" "+r.Path]; !ok {
				t.Errorf("%s is served as %s %s, and the middleware does not record it", key, r.Method, r.Path)
			}
		}
	}
}

// auditEnv is an API with a real store and real tokens, the profile
// "seat", two GPUs, and its log in a buffer.
type auditEnv struct {
	s       *Server
	st      *store.Store
	dsn     string
	log     *logtest.Buffer
	tokens  map[string]string // user → token
	tokenID map[string]int64
}

func newAuditEnv(t *testing.T, hcl string) *auditEnv {
	t.Helper()
	ctx := context.Background()
	db := storetest.Config(t, store.DriverSQLite, storetest.Quiet)
	e := &auditEnv{dsn: db.DSN, log: &logtest.Buffer{}, tokens: map[string]string{}, tokenID: map[string]int64{}}
	st := storetest.Open(t, db)
	e.st = st
	for _, name := range []string{"admin", "ann", "bob"} {
		if err := st.CreateUser(ctx, &store.User{Name: name, Admin: name == "admin"}); err != nil {
			t.Fatal(err)
		}
		plain, tok, err := st.CreateToken(ctx, name, "test", nil)
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[name], e.tokenID[name] = plain, tok.ID
	}
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(hcl + `
profile "seat" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	mock := &backend.Mock{
		InventoryF: func(context.Context) (backend.Inventory, error) {
			return backend.Inventory{Backend: "passthrough", Host: "sim", Simulated: true, GPUs: []backend.GPU{
				{Address: "0000:41:00.0", Model: "L40S", Mode: gpu.ModeIdle}}}, nil
		},
	}
	e.s = newServer(t, Deps{Auth: st, Backends: fakeBackends{"passthrough": mock}, Store: st, Config: &fakeConfig{cfg: cfg}, Host: "h1",
		Log: slog.New(slog.NewJSONHandler(e.log, nil))})
	return e
}

// entries is the whole audit log, oldest first.
func (e *auditEnv) entries(t *testing.T) []store.AuditEntry {
	t.Helper()
	var all []store.AuditEntry
	f := store.AuditFilter{Limit: store.MaxAuditPage}
	for {
		page, next, err := e.st.ListAudit(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if next == 0 {
			break
		}
		f.After = next
	}
	slices.Reverse(all)
	return all
}

// Each state-changing request is recorded once, after it is answered, with
// who asked (user, token ID), from where, the action, its target, the
// outcome and status, the problem's detail when refused, and the request
// ID; reads are not recorded.
func TestAuditMiddleware(t *testing.T) {
	e := newAuditEnv(t, "")
	ann, bob, admin := e.tokens["ann"], e.tokens["bob"], e.tokens["admin"]
	box := createBox(t, e.s, ann, `{"profile":"seat","name":"box","hours":1,"ssh_keys":["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBODYSECRET ann@laptop"]}`)
	vmID := box.VM.ID
	// A token made through the API: its secret is in the answer only.
	rec, _ := send(t, e.s, "POST", "/v1/users/ann/tokens", ann, `{"name":"laptop"}`)
	var made api.CreatedToken
	if rec.Code != 201 || json.Unmarshal(rec.Body.Bytes(), &made) != nil {
		t.Fatalf("token: %d %s", rec.Code, rec.Body)
	}
	secrets := []string{ann, bob, admin, made.Secret, "BODYSECRET"}

	type want struct {
		action, user, token, target, vm, outcome string
		status                                   int
		detail                                   string // a part of it
	}
	tests := []struct {
		name, method, path, token, body string
		want                            *want // nil: not recorded
	}{
		{"list VMs", "GET", "/v1/vms", ann, "", nil},
		{"get VM", "GET", "/v1/vms/" + vmID, ann, "", nil},
		{"whoami", "GET", "/v1/whoami", ann, "", nil},
		{"the audit log itself", "GET", "/v1/audit", ann, "", nil},
		{"unknown route", "POST", "/v1/nothing", ann, "", nil},
		{"create", "POST", "/v1/vms", ann, `{"profile":"seat","name":"two","hours":1}`,
			&want{"vm.create", "ann", "ann", "vm/ann/two", "*", "ok", 202, "profile seat, 1 hours"}},
		{"create refused", "POST", "/v1/vms", ann, `{"profile":"seat","name":"box"}`,
			&want{"vm.create", "ann", "ann", "", "", "refused", 409, "you already have a VM called"}},
		{"create malformed", "POST", "/v1/vms", ann, `{"profile":`,
			&want{"vm.create", "ann", "ann", "", "", "refused", 400, ""}},
		{"no token", "POST", "/v1/vms", "", `{"profile":"seat"}`,
			&want{"vm.create", "", "", "", "", "refused", 401, "send Authorization"}},
		{"stop a queued VM", "POST", "/v1/vms/box/actions/stop", ann, "",
			&want{"vm.stop", "ann", "ann", "vm/ann/box", vmID, "refused", 409, ""}},
		{"start a queued VM", "POST", "/v1/vms/box/actions/start", ann, "",
			&want{"vm.start", "ann", "ann", "vm/ann/box", vmID, "refused", 409, ""}},
		{"reboot, by an admin", "POST", "/v1/vms/" + vmID + "/actions/reboot", admin, "",
			&want{"vm.reboot", "admin", "admin", "vm/ann/box", vmID, "refused", 409, ""}},
		{"extend", "POST", "/v1/vms/" + vmID + "/actions/extend", ann, `{"hours":1}`,
			&want{"vm.extend", "ann", "ann", "vm/ann/box", vmID, "ok", 200, ""}},
		{"another's VM", "DELETE", "/v1/vms/" + vmID, bob, "",
			&want{"vm.delete", "bob", "bob", "vm/" + vmID, "", "refused", 404, "no VM"}},
		{"user by a user", "POST", "/v1/users", ann, `{"name":"carl"}`,
			&want{"user.create", "ann", "ann", "", "", "refused", 403, "this needs an admin"}},
		{"user", "POST", "/v1/users", admin, `{"name":"carl","groups":["render"]}`,
			&want{"user.create", "admin", "admin", "user/carl", "", "ok", 201, "admin false, groups render"}},
		{"token of another", "POST", "/v1/users/bob/tokens", ann, `{"name":"x"}`,
			&want{"token.create", "ann", "ann", "user/bob", "", "refused", 404, ""}},
		{"revoke", "DELETE", fmt.Sprintf("/v1/users/ann/tokens/%d", made.Token.ID), admin, "",
			&want{"token.revoke", "admin", "admin", fmt.Sprintf("user/ann/token/%d", made.Token.ID), "", "ok", 204, ""}},
		{"drain", "POST", "/v1/admin/gpus/41:00.0/drain", admin, `{"reason":"fan"}`,
			&want{"gpu.drain", "admin", "admin", "gpu/41:00.0", "", "ok", 200, ""}},
		{"undrain", "DELETE", "/v1/admin/gpus/0000:41:00.0/drain", admin, "",
			&want{"gpu.undrain", "admin", "admin", "gpu/0000:41:00.0", "", "ok", 200, ""}},
		{"reload", "POST", "/v1/admin/reload", admin, "",
			&want{"config.reload", "admin", "admin", "config", "", "ok", 200, ""}},
		{"reservation without a booker", "POST", "/v1/reservations", ann, `{"profile":"seat","start":"2030-01-01T10:00:00Z","end":"2030-01-01T12:00:00Z"}`,
			&want{"reservation.create", "ann", "ann", "", "", "failed", 503, ""}},
		{"cancel no reservation", "DELETE", "/v1/reservations/42", ann, "",
			&want{"reservation.delete", "ann", "ann", "reservation/42", "", "refused", 404, "no reservation 42"}},
		{"node drain", "POST", "/v1/admin/hosts/nope/drain", admin, "",
			&want{"host.drain", "admin", "admin", "host/nope", "", "refused", 404, ""}},
		{"delete", "DELETE", "/v1/vms/box", ann, "",
			&want{"vm.delete", "ann", "ann", "vm/ann/box", vmID, "ok", 202, ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.entries(t))
			rec, _ := send(t, e.s, tc.method, tc.path, tc.token, tc.body, "X-Forwarded-For", "198.51.100.9")
			after := e.entries(t)
			if tc.want == nil {
				if len(after) != before {
					t.Fatalf("%s %s (%d) was recorded: %+v", tc.method, tc.path, rec.Code, after[len(after)-1])
				}
				return
			}
			if len(after) != before+1 {
				t.Fatalf("%s %s (%d): %d entries written, want 1", tc.method, tc.path, rec.Code, len(after)-before)
			}
			got, w := after[len(after)-1], tc.want
			if rec.Code != w.status {
				t.Fatalf("answered %d, want %d: %s", rec.Code, w.status, rec.Body)
			}
			wantVM := w.vm
			if wantVM == "*" {
				var created api.CreateVMResponse
				_ = json.Unmarshal(rec.Body.Bytes(), &created)
				wantVM = created.VM.ID
			}
			if got.Action != w.action || got.User != w.user || got.TokenID != e.tokenID[w.token] || got.Target != w.target ||
				got.VMID != wantVM || got.Outcome != w.outcome || got.Status != w.status || !strings.Contains(got.Detail, w.detail) {
				t.Errorf("entry %+v\nwant %+v (token %d, vm %s)", got, *w, e.tokenID[w.token], wantVM)
			}
			if w.status >= 400 && got.Detail == "" {
				t.Errorf("a refusal without the problem's detail: %+v", got)
			}
			if got.Source != "192.0.2.1 (forwarded for 198.51.100.9)" {
				t.Errorf("source %q", got.Source)
			}
			if id := rec.Header().Get("X-Request-ID"); id == "" || got.RequestID != id {
				t.Errorf("request ID %q, answered %q", got.RequestID, id)
			}
		})
	}
	// No secret, token or body reaches the log, nor the database.
	all, _ := json.Marshal(e.entries(t))
	for _, secret := range secrets {
		if strings.Contains(string(all), secret) || strings.Contains(e.log.String(), secret) {
			t.Errorf("secret %q is in the audit log", secret)
		}
	}
	// server.audit.log defaults to true: every entry is a log line too.
	if n := strings.Count(e.log.String(), `"msg":"audit"`); n != len(e.entries(t)) {
		t.Errorf("%d audit log lines, %d entries", n, len(e.entries(t)))
	}
}

// The client's X-Request-ID is kept when it is sane and replaced when not;
// the answer always says which.
func TestRequestID(t *testing.T) {
	e := newAuditEnv(t, "")
	for _, tc := range []struct{ sent, want string }{
		{"", ""},
		{"4bf92f3577b34da6a3ce929d0e0e4736", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"req-1.a:b/c+d=", "req-1.a:b/c+d="},
		{"bad id with spaces", ""},
		{"-starts-with-dash", ""},
		{strings.Repeat("a", 129), ""},
		{"evil\"\nlevel=ERROR", ""},
	} {
		rec, _ := send(t, e.s, "POST", "/v1/admin/reload", e.tokens["admin"], "", "X-Request-ID", tc.sent)
		got := rec.Header().Get("X-Request-ID")
		switch {
		case tc.want != "" && got != tc.want:
			t.Errorf("sent %q, answered %q", tc.sent, got)
		case tc.want == "" && !regexp.MustCompile(`^[0-9a-f]{24}$`).MatchString(got):
			t.Errorf("sent %q, answered %q: want one of gpuvmd's", tc.sent, got)
		}
		all := e.entries(t)
		if last := all[len(all)-1]; last.RequestID != got {
			t.Errorf("sent %q: entry has %q, answer %q", tc.sent, last.RequestID, got)
		}
	}
	// GETs carry one too.
	if rec, _ := send(t, e.s, "GET", "/v1/whoami", e.tokens["ann"], ""); rec.Header().Get("X-Request-ID") == "" {
		t.Error("GET without a request ID")
	}
}

// server { audit { log = false } } keeps entries out of the log, not out
// of the database.
func TestAuditLogSetting(t *testing.T) {
	e := newAuditEnv(t, "server {\n audit {\n log = false\n }\n}\n")
	if rec, _ := send(t, e.s, "POST", "/v1/admin/reload", e.tokens["admin"], ""); rec.Code != 200 {
		t.Fatal(rec.Code)
	}
	if n := len(e.entries(t)); n != 1 || strings.Contains(e.log.String(), `"msg":"audit"`) {
		t.Errorf("%d entries; log: %s", n, e.log.String())
	}
}

// A write that fails leaves the answer as it was, and is logged at error
// with the whole entry and counted.
func TestAuditWriteFailure(t *testing.T) {
	e := newAuditEnv(t, "")
	breakAuditAt(t, e.dsn)
	rec, _ := send(t, e.s, "POST", "/v1/users", e.tokens["admin"], `{"name":"carl"}`)
	if rec.Code != 201 {
		t.Fatalf("create user: %d %s", rec.Code, rec.Body)
	}
	if _, err := e.st.GetUser(context.Background(), "carl"); err != nil {
		t.Errorf("the user was not made: %v", err)
	}
	if n := e.s.AuditWriteFailures(); n != 1 {
		t.Errorf("AuditWriteFailures = %d, want 1", n)
	}
	var line map[string]any
	for _, l := range strings.Split(e.log.String(), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) {
			_ = json.Unmarshal([]byte(l), &line)
		}
	}
	if line["action"] != "user.create" || line["target"] != "user/carl" || line["user"] != "admin" ||
		!strings.Contains(fmt.Sprint(line["err"]), "disk is full") || !strings.Contains(fmt.Sprint(line["msg"]), "NOT WRITTEN") {
		t.Errorf("error line %v in\n%s", line, e.log.String())
	}
}

// The audit routes: admins read everything, users their own entries; the
// filters and pages; every parameter range-checked.
func TestAuditRoutes(t *testing.T) {
	e := newAuditEnv(t, "")
	ctx := context.Background()
	base := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	rows := []store.AuditEntry{
		{User: "ann", Action: "vm.create", Target: "vm/ann/box", VMID: "v1", Outcome: store.AuditOK, Status: 202},
		{User: "ann", Action: "vm.stop", Target: "vm/ann/box", VMID: "v1", Outcome: store.AuditOK, Status: 202},
		{User: "bob", Action: "vm.delete", Target: "vm/v1", Outcome: store.AuditRefused, Status: 404, Detail: "no VM"},
		{User: "ann", Action: "token.create", Target: "user/ann/token/9", Outcome: store.AuditOK, Status: 201},
		{User: "bob", Action: "console.open", Target: "vm/bob/big", VMID: "v2", Outcome: store.AuditOK, Status: 101},
	}
	for i := range rows {
		rows[i].CreatedAt = base.Add(time.Duration(i) * time.Hour)
		if err := e.st.AppendAudit(ctx, &rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	// ann's VM "box" is v1 for the name filter.
	vm := &store.VM{Name: "box", Owner: "ann", Profile: "seat", Hours: 1}
	if _, err := e.st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.AppendAudit(ctx, &store.AuditEntry{CreatedAt: base.Add(5 * time.Hour), User: "ann", Action: "vm.start", VMID: vm.ID, Outcome: store.AuditOK, Status: 202}); err != nil {
		t.Fatal(err)
	}
	list := func(t *testing.T, token, path string) (int, api.AuditList, map[string]any) {
		t.Helper()
		rec, m := send(t, e.s, "GET", path, token, "")
		var l api.AuditList
		if rec.Code == 200 {
			dec := json.NewDecoder(rec.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&l); err != nil {
				t.Fatal(err)
			}
		}
		return rec.Code, l, m
	}
	actions := func(l api.AuditList) string {
		var out []string
		for _, x := range l.Items {
			out = append(out, x.User+":"+x.Action)
		}
		return strings.Join(out, ",")
	}
	admin, ann, bob := e.tokens["admin"], e.tokens["ann"], e.tokens["bob"]
	q := func(s string) string { return strings.NewReplacer("+", "%2B").Replace(s) }
	for _, tc := range []struct {
		name, token, path string
		want              string
	}{
		{"admin: all", admin, "/v1/admin/audit", "ann:vm.start,bob:console.open,ann:token.create,bob:vm.delete,ann:vm.stop,ann:vm.create"},
		{"admin: a user", admin, "/v1/admin/audit?user=bob", "bob:console.open,bob:vm.delete"},
		{"admin: a VM by ID", admin, "/v1/admin/audit?vm=v1", "ann:vm.stop,ann:vm.create"},
		{"admin: an action", admin, "/v1/admin/audit?action=vm.stop", "ann:vm.stop"},
		{"admin: a kind", admin, "/v1/admin/audit?action=vm.", "ann:vm.start,bob:vm.delete,ann:vm.stop,ann:vm.create"},
		{"admin: a range", admin, "/v1/admin/audit?from=" + q(base.Add(time.Hour).Format(time.RFC3339)) + "&to=" + q(base.Add(3*time.Hour).Format(time.RFC3339)), "bob:vm.delete,ann:vm.stop"},
		{"admin: range with an offset", admin, "/v1/admin/audit?from=" + q("2026-03-01T13:00:00+01:00"), "ann:vm.start,bob:console.open,ann:token.create"},
		{"user: own only", ann, "/v1/audit", "ann:vm.start,ann:token.create,ann:vm.stop,ann:vm.create"},
		{"user: own by name", ann, "/v1/audit?user=ann&action=vm.", "ann:vm.start,ann:vm.stop,ann:vm.create"},
		{"user: a VM by its name", ann, "/v1/audit?vm=box", "ann:vm.start"},
		{"user: another's VM shows nothing", bob, "/v1/audit?vm=v1", ""},
		{"user: another's entries stay hidden", bob, "/v1/audit?action=token.", ""},
		{"admin: own", admin, "/v1/audit", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, l, m := list(t, tc.token, tc.path)
			if code != 200 || actions(l) != tc.want || l.Next != "" {
				t.Errorf("%d %v: %q next %q, want %q", code, m, actions(l), l.Next, tc.want)
			}
		})
	}
	// One entry in full, as the wire has it.
	_, l, _ := list(t, admin, "/v1/admin/audit?action=vm.delete")
	if want := (api.AuditEntry{ID: rows[2].ID, Time: rows[2].CreatedAt, User: "bob", Action: "vm.delete", Target: "vm/v1", Outcome: "refused", Status: 404, Detail: "no VM"}); len(l.Items) != 1 || !l.Items[0].Time.Equal(want.Time) {
		t.Fatalf("%+v", l)
	} else if l.Items[0].Time = want.Time; l.Items[0] != want {
		t.Errorf("%+v, want %+v", l.Items[0], want)
	}

	// Pages: every entry once, newest first.
	var seen []string
	path := "/v1/admin/audit?limit=4"
	for pages := 0; ; pages++ {
		code, l, m := list(t, admin, path)
		if code != 200 || pages > 3 || len(l.Items) > 4 {
			t.Fatalf("page %d: %d %v %+v", pages, code, m, l)
		}
		seen = append(seen, actions(l))
		if l.Next == "" {
			break
		}
		path = "/v1/admin/audit?limit=4&after=" + l.Next
	}
	if got := strings.Join(seen, "|"); got != "ann:vm.start,bob:console.open,ann:token.create,bob:vm.delete|ann:vm.stop,ann:vm.create" {
		t.Errorf("pages %s", got)
	}
	_, own, _ := list(t, ann, "/v1/audit?limit=1")
	if _, next, _ := list(t, ann, "/v1/audit?limit=1&after="+own.Next); own.Next == "" || actions(next) != "ann:token.create" {
		t.Errorf("own pages: %+v then %+v", own, next)
	}

	for _, tc := range []struct {
		name, token, path string
		status            int
		kind, field       string
	}{
		{"a user on the admin route", ann, "/v1/admin/audit", 403, "forbidden", ""},
		{"no token", "", "/v1/audit", 401, "unauthenticated", ""},
		{"another user's entries", ann, "/v1/audit?user=bob", 403, "forbidden", "user"},
		{"limit 0", admin, "/v1/admin/audit?limit=0", 400, "bad-request", "limit"},
		{"limit too big", admin, "/v1/admin/audit?limit=501", 400, "bad-request", "limit"},
		{"limit not a number", ann, "/v1/audit?limit=ten", 400, "bad-request", "limit"},
		{"cursor", admin, "/v1/admin/audit?after=0", 400, "bad-request", "after"},
		{"cursor not a number", admin, "/v1/admin/audit?after=abc", 400, "bad-request", "after"},
		{"from not a time", admin, "/v1/admin/audit?from=yesterday", 400, "bad-request", "from"},
		{"to not a time", ann, "/v1/audit?to=2026-03-01", 400, "bad-request", "to"},
		{"from too early", admin, "/v1/admin/audit?from=0001-01-01T00:00:00Z", 400, "bad-request", "from"},
		{"to before from", admin, "/v1/admin/audit?from=2026-03-02T00:00:00Z&to=2026-03-01T00:00:00Z", 400, "bad-request", "to"},
		{"unknown action", admin, "/v1/admin/audit?action=vm.explode", 400, "bad-request", "action"},
		{"unknown kind", admin, "/v1/admin/audit?action=x.", 400, "bad-request", "action"},
		{"a pattern", admin, "/v1/admin/audit?action=%25", 400, "bad-request", "action"},
		{"user name", admin, "/v1/admin/audit?user=Ann%20Smith", 400, "bad-request", "user"},
		{"empty vm", admin, "/v1/admin/audit?vm=", 400, "bad-request", "vm"},
		{"long vm", admin, "/v1/admin/audit?vm=" + strings.Repeat("x", 201), 400, "bad-request", "vm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, m := list(t, tc.token, tc.path)
			wantProblem(t, tc.name, code, m, tc.status, tc.kind, tc.field, "")
		})
	}
	// No route writes the audit log: every route under it is a GET.
	for _, r := range e.s.engine.Routes() {
		if strings.Contains(r.Path, "audit") && r.Method != http.MethodGet {
			t.Errorf("%s %s writes the audit log", r.Method, r.Path)
		}
	}
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		if rec, _ := send(t, e.s, m, "/v1/admin/audit", admin, `{}`); rec.Code != 404 && rec.Code != 405 {
			t.Errorf("%s /v1/admin/audit: %d", m, rec.Code)
		}
	}
}

// A request proxied to the VM's node is recorded there, not by the node
// that proxied it.
func TestAuditSkipsForwarded(t *testing.T) {
	e := newAuditEnv(t, "")
	rec := &auditRecord{}
	c, _ := newTestContext(rec)
	auditForwarded(c, true)
	e.s.finishAudit(c, rec, 200)
	auditForwarded(c, false)
	if n := len(e.entries(t)); n != 0 || rec.done {
		t.Fatalf("a forwarded request was recorded (%d entries)", n)
	}
	e.s.finishAudit(c, rec, 502)
	if all := e.entries(t); len(all) != 1 || all[0].Outcome != store.AuditFailed {
		t.Errorf("a failed forward: %+v", all)
	}
}

func newTestContext(rec *auditRecord) (*gin.Context, *httptest.ResponseRecorder) {
	w := httptest.NewRecorder()
	c, _ := gin.CreateTestContext(w)
	c.Request = httptest.NewRequest("GET", "/v1/vms/x/console", nil)
	rec.entry.Action = "console.ticket"
	c.Set(auditKey, rec)
	return c, w
}

// breakAuditAt makes every later audit write of the SQLite database at dsn
// fail, as a full disk would.
func breakAuditAt(t *testing.T, dsn string) {
	t.Helper()
	db, err := gorm.Open(sqlite.Open(dsn), &gorm.Config{Logger: gormlogger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	if err := db.Exec("CREATE TRIGGER audit_full BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END").Error; err != nil {
		t.Fatal(err)
	}
}

// Consoles and tunnels: the ticket issued and the connection opened are
// recorded, the connection as its ticket's user, before it opens; one whose
// entry cannot be written does not open.
func TestAuditConsoleAndTunnel(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	last := func() store.AuditEntry {
		t.Helper()
		es, _, err := e.st.ListAudit(ctx, store.AuditFilter{Limit: 1})
		if err != nil || len(es) != 1 {
			t.Fatalf("%v %v", es, err)
		}
		return es[0]
	}
	check := func(what string, got store.AuditEntry, action, user, outcome string, status int, detail string) {
		t.Helper()
		if got.Action != action || got.User != user || got.Outcome != outcome || got.Status != status || !strings.Contains(got.Detail, detail) {
			t.Errorf("%s: %+v; want %s by %q, %s %d, detail %q", what, got, action, user, outcome, status, detail)
		}
		if user != "" && got.Status < 400 && (got.VMID != e.box.ID || got.Target != "vm/ann/box") {
			t.Errorf("%s: target %q vm %q", what, got.Target, got.VMID)
		}
	}
	if resp, _ := e.call("GET", "/v1/vms/box/console.vv", "ann-token", ""); resp.StatusCode != 200 {
		t.Fatalf("console.vv: %d", resp.StatusCode)
	}
	check("virt-viewer file", last(), "console.file", "ann", "ok", 200, "")
	if resp, _ := e.call("GET", "/v1/vms/other/console", "ann-token", ""); resp.StatusCode != 404 {
		t.Fatalf("another's console: %d", resp.StatusCode)
	}
	if got := last(); got.Target != "vm/other" || got.VMID != "" {
		t.Errorf("another's console: target %q vm %q, want what was asked only", got.Target, got.VMID)
	}
	check("another's console", last(), "console.ticket", "ann", "refused", 404, "no VM")
	c := e.console("ann-token", e.box)
	check("console ticket", last(), "console.ticket", "ann", "ok", 200, "")
	ws, code, detail := e.dialWS(ctx, c.WebSocketURL)
	if ws == nil {
		t.Fatalf("console refused: %d %s", code, detail)
	}
	// Recorded while it is open, not when it ends.
	check("console open", last(), "console.open", "ann", "ok", 101, "")
	ws.Close(websocket.StatusNormalClosure, "")
	if ws, code, _ := e.dialWS(ctx, c.WebSocketURL); ws != nil || code != 403 {
		t.Fatalf("second use: %d", code)
	}
	check("spent ticket", last(), "console.open", "", "refused", 403, "already used")
	if ticket := last(); strings.Contains(fmt.Sprint(ticket), c.Ticket) {
		t.Errorf("the ticket is in the audit log: %+v", ticket)
	}

	code, tun, p := e.tunnel("admin-token", e.box.ID, `{"port":7}`)
	if code != 200 {
		t.Fatalf("tunnel: %d %+v", code, p)
	}
	check("tunnel ticket", last(), "tunnel.ticket", "admin", "ok", 200, "port 7")
	tws, code, detail := e.dialWS(ctx, tun.WebSocketURL)
	if tws == nil {
		t.Fatalf("tunnel refused: %d %s", code, detail)
	}
	check("tunnel open", last(), "tunnel.open", "admin", "ok", 101, "port 7")
	tws.Close(websocket.StatusNormalClosure, "")
	// A port the guest refuses: the guest's refusal, not gpuvmd's failure.
	if code, tun, p = e.tunnel("ann-token", e.box.ID, `{"port":2222}`); code != 200 {
		t.Fatalf("tunnel: %d %+v", code, p)
	}
	if tws, code, _ := e.dialWS(ctx, tun.WebSocketURL); tws != nil || code != 502 {
		t.Fatalf("tunnel to a closed port: %d, want 502", code)
	}
	check("tunnel refused by the guest", last(), "tunnel.open", "ann", "refused", 502, "the guest refused the connection on port 2222 of VM box")
	code, tun, p = e.tunnel("ann-token", e.box.ID, `{"port":7,"protocol":"udp"}`)
	if code != 200 {
		t.Fatalf("udp tunnel: %d %+v", code, p)
	}
	check("udp tunnel ticket", last(), "tunnel.ticket", "ann", "ok", 200, "port 7/udp")
	if tws, code, detail = e.dialWS(ctx, tun.WebSocketURL); tws == nil {
		t.Fatalf("udp tunnel refused: %d %s", code, detail)
	}
	check("udp tunnel open", last(), "udptunnel.open", "ann", "ok", 101, "port 7/udp")
	tws.Close(websocket.StatusNormalClosure, "")

	// The audit log fails: a ticket is still issued (its answer stands),
	// but the connection is refused.
	before := last()
	breakAuditAt(t, e.dsn)
	c = e.console("ann-token", e.box)
	if ws, code, detail := e.dialWS(ctx, c.WebSocketURL); ws != nil || code != 503 || !strings.Contains(detail, "audit log") {
		t.Errorf("console without an audit entry: %d %q", code, detail)
	}
	if n := e.srv.AuditWriteFailures(); n != 3 { // the ticket, the open, the refusal
		t.Errorf("AuditWriteFailures = %d, want 3", n)
	}
	if got := last(); got.ID != before.ID {
		t.Errorf("an entry was written: %+v", got)
	}
}

// What a client sends is kept short and on one line.
func TestAuditClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"vm/ann/box", 20, "vm/ann/box"},
		{"a\nb\rc\x00d", 20, "a b c d"},
		{"abcdefghij", 8, "abcde…"},
		{"ééééé", 8, "éé…"}, // never half a rune
		{"bad \xff byte", 20, "bad   byte"},
	} {
		if got := clip(tc.in, tc.n); got != tc.want || len(got) > tc.n {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	r := httptest.NewRequest("POST", "/v1/vms", nil)
	r.RemoteAddr = "[2001:db8::1]:5000"
	if got := auditSource(r); got != "2001:db8::1" {
		t.Errorf("source %q", got)
	}
	r.Header.Set("X-Forwarded-For", "203.0.113.5\n, 10.0.0.1")
	if got := auditSource(r); got != "2001:db8::1 (forwarded for 203.0.113.5 , 10.0.0.1)" {
		t.Errorf("source %q", got)
	}
}
