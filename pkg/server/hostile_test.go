package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The adversarial walk: every route of the API (apiRoutes, so that a new
// route is walked as soon as it is documented) gets hostile requests —
// bodies with a key twice, numbers past their range or their type, values
// of the wrong type, unknown fields, deep nesting, too many bytes, nothing,
// data after the value; hostile query, header and path parameters. No
// answer is a 5xx; every refusal is problem+json with a detail, naming the
// field when the fault is one field's; and a refused request leaves the
// database as it was.

// hostileBodies are valid bodies of the routes that take one, which the
// walk spoils one fault at a time. A route with a body and none here fails
// the walk. status is what the valid body gets (checked at the end).
var hostileBodies = map[string]struct {
	body     string
	status   int
	optional bool // an empty body is valid
}{
	"POST /v1/vms":                      {body: `{"profile":"seat","name":"fresh","hours":2,"ssh_keys":["ssh-ed25519 AAAA"],"start_at":"2026-12-03T10:00:00Z"}`, status: 202},
	"POST /v1/vms/{id}/actions/extend":  {body: `{"hours":1}`, status: 200},
	"POST /v1/vms/{id}/actions/resize":  {body: `{"profile":"seat","dry_run":true}`, status: 409}, // the walk's VM is queued, not stopped
	"POST /v1/users":                    {body: `{"name":"zed","admin":false,"groups":["lab"]}`, status: 201},
	"POST /v1/users/{name}/tokens":      {body: `{"name":"ci","expires_in_hours":24}`, status: 201},
	"POST /v1/admin/gpus/{addr}/drain":  {body: `{"reason":"fan"}`, status: 200, optional: true},
	"POST /v1/admin/driver-changes":     {body: `{"driver":"550.90.07","at":"2027-01-10T09:00:00Z","note":"vGPU 17.4"}`, status: 201},
	"POST /v1/reservations":             {body: `{"profile":"whole","count":1,"start":"2026-12-02T14:00:00+01:00","end":"2026-12-02T16:00:00+01:00","note":"lab"}`, status: 201},
	"POST /v1/vms/{id}/tunnel":          {body: `{"port":22}`, status: 409}, // the VM is not running
	"POST /v1/vms/{id}/actions/start":   {status: 409, optional: true},      // the VM is queued
	"POST /v1/vms/{id}/actions/stop":    {status: 409, optional: true},
	"POST /v1/vms/{id}/actions/reboot":  {status: 409, optional: true},
	"POST /v1/admin/reload":             {status: 200, optional: true},
	"POST /v1/login":                    {body: `{"username":"alice","password":"secret"}`, status: 404},
	"POST /v1/logout":                   {status: 422, optional: true},
	"POST /v1/auth/oidc/device":         {status: 404, optional: true},
	"POST /v1/auth/oidc/device/poll":    {body: `{"id":"x"}`, status: 404},
	"POST /v1/auth/oidc/token":          {body: `{"code":"x","code_verifier":"y"}`, status: 404},
	"POST /v1/admin/hosts/{name}/drain": {status: 404, optional: true}, // no node of that name
	"POST /v1/admin/orphans/{id}/adopt": {body: `{"owner":"ann","name":"adopted","profile":"seat"}`, status: 201},
	"POST /v1/admin/volumes/adopt":      {body: `{"file":"p/gpuvm-disk-x-01a23326-de26-7342-b7c0-0123456789cd.qcow2","owner":"ann","name":"found"}`, status: 201},
	"POST /v1/session":                  {body: `{"token":"gpuvm_not-a-token"}`, status: 401}, // portal.go's sign-in
	"POST /v1/vms/{id}/credentials":     {status: 200, optional: true},                        // spent by the first that passes
	// tasks.go
	"POST /v1/tasks":             {body: `{"profile":"seat","command":["python","train.py"],"env":{"EPOCHS":"30"},"time_limit":"2h","kill_wait":"10s"}`, status: 202},
	"POST /v1/tasks/{id}/cancel": {status: 202, optional: true},
	// snapshots.go: the VM is queued; it has no snapshot of that name.
	"POST /v1/vms/{id}/snapshots":                {body: `{"label":"before upgrade"}`, status: 409, optional: true},
	"POST /v1/vms/{id}/snapshots/{snap}/restore": {status: 404, optional: true},
	// volumes.go: ann's disk "scratch" is attached to box (queued).
	"POST /v1/volumes":                     {body: `{"name":"fresh","size":"1GiB"}`, status: 201},
	"POST /v1/volumes/{id}/actions/resize": {body: `{"size":"4GiB"}`, status: 200},
	"POST /v1/volumes/{id}/actions/attach": {body: `{"vm":"box"}`, status: 200},
	"POST /v1/volumes/{id}/actions/detach": {status: 200, optional: true},
	// images.go: a file that is not there, a VM that is not.
	"POST /v1/admin/images":         {body: `{"source_path":"/nonexistent/disk.qcow2","name":"disk","os":"linux","firmware":"uefi","sha256":"` + strings.Repeat("0", 64) + `"}`, status: 422},
	"POST /v1/admin/images/publish": {body: `{"vm":"nope","name":"disk","os":"linux","firmware":"uefi"}`, status: 404},
	// windowsinstall.go: an ISO that is not there.
	"POST /v1/admin/images/windows-install": {body: `{"name":"win","iso":"/nonexistent/win.iso","virtio_win":"/nonexistent/virtio-win.iso","password_file":"/nonexistent/pw"}`, status: 422},
}

// Routes whose dependencies the walk's server lacks answer 503 by design.
var hostileUnavailable = map[string]bool{"GET /metrics": true, "GET /readyz": true}

type hostileEnv struct {
	t       *testing.T
	s       *Server
	st      *store.Store
	box     string // ann's VM
	vol     string // ann's data disk, attached to box
	op      string // its create
	resID   string // ann's reservation
	tokenID string // ann's token
	task    string // ann's task

	last     string // the database's fingerprint after the last request ("": to take)
	requests int
}

func newHostileEnv(t *testing.T) *hostileEnv {
	s, st, _ := reservationServer(t)
	s.Admission = s.Bookings.(Admitter) // the orchestrator
	s.Consoles = &fakeConsoles{}
	s.Orphans = &fakeOrphans{st: st, items: []api.Orphan{
		{ID: "domain-aaaaaaaaaaaa", Kind: api.OrphanDomain, Name: "gpuvm-0123456789ab", VMID: "01a23326-de26-7342-b7c0-0123456789ab", Adoptable: true, Reason: "no row"},
		{ID: "volume-aaaaaaaaaaaa", Kind: api.OrphanVolume, Name: "p/gpuvm-disk-x-01a23326-de26-7342-b7c0-0123456789cd.qcow2", VMID: "01a23326-de26-7342-b7c0-0123456789cd", Adoptable: true, Reason: "no row"}}}
	s.Images = &images.Manager{Store: st, Volumes: dirVolumes{t.TempDir()}, Pool: "gpuvm", Uploads: &images.Uploads{Dir: t.TempDir()},
		DomainName: func(id string) string { return id }, Log: slog.New(slog.DiscardHandler)}
	s.Windows = &WindowsInstalls{Host: noWindowsHost{}, Pool: "gpuvm"}
	s.Volumes = fakeVolumes{st}
	e := &hostileEnv{t: t, s: s, st: st}
	var vol api.Volume
	e.mustCall("POST", "/v1/volumes", "ann-token", `{"name":"scratch","size":"1GiB"}`, 201, &vol)
	e.vol = vol.ID
	var vm api.CreateVMResponse
	e.mustCall("POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"box","hours":2}`, 202, &vm)
	e.box, e.op = vm.VM.ID, vm.Operation.ID
	e.mustCall("POST", "/v1/volumes/scratch/actions/attach", "ann-token", `{"vm":"box"}`, 200, &vol)
	var res api.Reservation
	e.mustCall("POST", "/v1/reservations", "ann-token", `{"profile":"whole","start":"2026-12-03T14:00:00+01:00","end":"2026-12-03T16:00:00+01:00"}`, 201, &res)
	e.resID = strconv.FormatInt(res.ID, 10)
	var tok api.CreatedToken
	e.mustCall("POST", "/v1/users/ann/tokens", "ann-token", `{"name":"laptop"}`, 201, &tok)
	e.tokenID = strconv.FormatInt(tok.Token.ID, 10)
	var task api.Task
	e.mustCall("POST", "/v1/tasks", "ann-token", `{"profile":"seat","command":["true"],"time_limit":"1h"}`, 202, &task)
	e.task = task.ID
	return e
}

func (e *hostileEnv) mustCall(method, path, token, body string, status int, out any) {
	e.t.Helper()
	rec := e.do(context.Background(), method, path, token, body, nil)
	if rec.Code != status {
		e.t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		e.t.Fatal(err)
	}
}

func (e *hostileEnv) do(ctx context.Context, method, path, token, body string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	e.s.ServeHTTP(rec, req)
	return rec
}

// path fills in a route's path parameters with the env's objects, or with
// bad when not empty.
func (e *hostileEnv) path(r route, bad string) string {
	p := r.Path
	val := func(name string) string {
		if bad != "" {
			return url.PathEscape(bad)
		}
		switch {
		case name == "filepath":
			return "static/console.js"
		case name == "addr":
			return "0000:a1:00.0"
		case strings.HasPrefix(p, "/v1/admin/hosts/"):
			return "nowhere"
		case strings.HasPrefix(p, "/v1/profiles/"):
			return "whole"
		case strings.HasPrefix(p, "/v1/users/") && name == "name":
			return "ann"
		case strings.HasPrefix(p, "/v1/users/"):
			return e.tokenID
		case strings.HasPrefix(p, "/v1/operations/"):
			return e.op
		case strings.HasPrefix(p, "/v1/reservations/"):
			return e.resID
		case strings.HasPrefix(p, "/v1/admin/orphans/"):
			return "domain-aaaaaaaaaaaa"
		case strings.HasPrefix(p, "/v1/admin/images/"):
			return "disk"
		case strings.HasPrefix(p, "/v1/volumes/"):
			return e.vol
		case strings.HasPrefix(p, "/v1/tasks/"):
			return e.task
		}
		return e.box
	}
	for {
		i := strings.Index(p, "{")
		if i < 0 {
			return p
		}
		j := strings.Index(p[i:], "}") + i
		p = p[:i] + val(p[i+1:j]) + p[j+1:]
	}
}

func tokenOf(r route) string {
	switch r.Auth {
	case authAdmin:
		return "admin-token"
	case authUser:
		return "ann-token"
	}
	return ""
}

// fingerprint is what the API may change in the database.
func (e *hostileEnv) fingerprint() string {
	e.t.Helper()
	ctx := context.Background()
	var b strings.Builder
	add := func(name string, v any, err error) {
		if err != nil {
			e.t.Fatalf("fingerprint %s: %v", name, err)
		}
		j, _ := json.Marshal(v)
		fmt.Fprintf(&b, "%s=%s\n", name, j)
	}
	last, err := e.st.LastEventID(ctx)
	add("events", last, err)
	vms, err := e.st.ListVMs(ctx, store.VMFilter{States: vmStates, Limit: 1000})
	add("vms", vms, err)
	for _, vm := range vms.VMs {
		ops, err := e.st.ListOperations(ctx, vm.ID)
		add("ops "+vm.ID, ops, err)
		// Whether its one-time desktop password is spent.
		cr, err := e.st.GetVMCredential(ctx, vm.ID)
		if errors.Is(err, store.ErrNotFound) {
			cr, err = &store.VMCredential{}, nil
		}
		add("credential read "+vm.ID, cr.ReadAt, err)
	}
	us, err := e.st.ListUsers(ctx)
	add("users", us, err)
	for _, u := range us {
		ts, err := e.st.ListTokens(ctx, u.Name)
		add("tokens "+u.Name, ts, err)
	}
	gs, err := e.st.ListGroups(ctx)
	add("groups", gs, err)
	rs, err := e.st.ListReservations(ctx, store.ReservationFilter{})
	add("reservations", rs, err)
	ds, err := e.st.ListGPUDrains(ctx, "")
	add("drains", ds, err)
	hs, err := e.st.ListHosts(ctx)
	add("hosts", hs, err)
	sn, err := e.st.ListAllSnapshots(ctx)
	add("snapshots", sn, err)
	vols, err := e.st.ListVolumes(ctx, store.VolumeFilter{})
	add("volumes", vols, err)
	return b.String()
}

// hostileCase is one hostile request of a route, and what its refusal
// must name: field "" is any (or none), "*" any field of the body.
type hostileCase struct {
	name      string
	path      string
	body      string
	hdr       map[string]string
	wantCode  int // 0: any refusal (4xx)
	wantField string
	mayPass   bool // a 2xx is right (a hostile value that is valid)
}

func TestHostileRequestsOnEveryRoute(t *testing.T) {
	e := newHostileEnv(t)
	covered := map[string]bool{}
	for _, r := range apiRoutes {
		key := r.Method + " " + r.Path
		var cases []hostileCase
		switch r.Method {
		case "POST":
			base, ok := hostileBodies[key]
			if !ok {
				t.Errorf("%s: the walk has no valid body of this route: add one to hostileBodies", key)
				continue
			}
			covered[key] = true
			cases = append(cases, bodyCases(e.path(r, ""), r.Body, base.body, base.optional)...)
		case "GET":
			cases = append(cases, queryCases(e.path(r, ""), r)...)
		}
		cases = append(cases, pathCases(e, r)...)
		cases = append(cases, headerCases(e.path(r, ""), r, hostileBodies[key].body)...)
		for _, tc := range cases {
			e.check(r, tc)
		}
	}
	for key := range hostileBodies {
		if !covered[key] {
			t.Errorf("hostileBodies has %s, which is not a route", key)
		}
	}
	t.Logf("%d hostile requests on %d routes", e.requests, len(apiRoutes))
	// The valid bodies are valid: each fault above was the only one.
	for _, r := range apiRoutes {
		key := r.Method + " " + r.Path
		base, ok := hostileBodies[key]
		if !ok {
			continue
		}
		rec := e.do(context.Background(), r.Method, e.path(r, ""), tokenOf(r), base.body, nil)
		if rec.Code != base.status {
			t.Errorf("%s with its valid body: %d %s, want %d", key, rec.Code, rec.Body, base.status)
		}
	}
}

// check sends one hostile request and checks the answer and the database.
func (e *hostileEnv) check(r route, tc hostileCase) {
	t := e.t
	t.Helper()
	key := r.Method + " " + r.Path
	if e.last == "" {
		e.last = e.fingerprint()
	}
	before := e.last
	e.requests++
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if r.ContentType == "text/event-stream" {
		// A stream that is not refused runs until its client leaves.
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	}
	rec := e.do(ctx, r.Method, tc.path, tokenOf(r), tc.body, tc.hdr)
	left := ctx.Err() != nil
	cancel()
	what := fmt.Sprintf("%s (%s, %.80q)", key, tc.name, tc.body)
	code := rec.Code
	switch {
	case code == StatusClientClosed && left:
		return // a stream's client that left before the answer
	case code == http.StatusServiceUnavailable && hostileUnavailable[key]:
		return
	case code >= 500:
		t.Errorf("%s: %d %s", what, code, rec.Body)
		return
	case code < 400:
		if !tc.mayPass {
			t.Errorf("%s: accepted (%d %.200s), want a refusal", what, code, rec.Body)
		}
		e.last = "" // it may have changed the database
		return
	}
	if !documented(r, code) {
		t.Errorf("%s: %d, which the route does not document (its Errors: %v)", what, code, r.Errors)
	}
	if tc.wantCode != 0 && code != tc.wantCode {
		t.Errorf("%s: %d %s, want %d", what, code, rec.Body, tc.wantCode)
	}
	if after := e.fingerprint(); after != before {
		t.Errorf("%s: refused with %d, and the database changed:\n%s\nthen:\n%s", what, code, before, after)
		e.last = after
	}
	if r.ContentType != "" && r.ContentType != "text/event-stream" {
		return // the browser page refuses with HTML pages, its assets with text
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: %d with Content-Type %q, want application/problem+json", what, code, ct)
		return
	}
	var p api.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Errorf("%s: %d, the problem does not decode: %v %s", what, code, err, rec.Body)
		return
	}
	if !strings.HasPrefix(p.Type, ProblemBase) || p.Status != code || p.Detail == "" || p.Title == "" {
		t.Errorf("%s: %d, problem %+v lacks its type, status, title or detail", what, code, p)
	}
	switch {
	case tc.wantField == "*":
		if p.Field == "" && (code == 400 || code == 422) {
			t.Errorf("%s: %d %q names no field", what, code, p.Detail)
		}
	case tc.wantField != "" && p.Field != tc.wantField:
		t.Errorf("%s: %d field %q (%s), want field %q", what, code, p.Field, p.Detail, tc.wantField)
	}
}

// bodyCases are the hostile bodies of a POST route: the faults any body may
// have, then each field's of its body type.
func bodyCases(path string, typ any, base string, optional bool) []hostileCase {
	deep := strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)
	cases := []hostileCase{
		{name: "key twice", body: `{"x_dup":1,"x_dup":2}`, wantCode: 400, wantField: "x_dup"},
		{name: "key twice deep", body: `{"a":[{"b":{"c":1,"c":2}}]}`, wantCode: 400, wantField: "a[0].b.c"},
		{name: "unknown field", body: `{"hostile_unknown":1}`, wantCode: 400, wantField: "hostile_unknown"},
		{name: "deep nesting", body: deep, wantCode: 400},
		{name: "deep arrays", body: strings.Repeat("[", 100000), wantCode: 400},
		{name: "too large", body: `{"x":"` + strings.Repeat("a", api.MaxRequestBytes) + `"}`, wantCode: 413},
		{name: "truncated", body: `{"x":`, wantCode: 400},
		{name: "not JSON", body: `<xml/>`, wantCode: 400},
		{name: "a string", body: `"hello"`, wantCode: 400},
		{name: "an array", body: `[]`, wantCode: 400},
		{name: "a number", body: `12`, wantCode: 400},
		{name: "two objects", body: `{}{}`, wantCode: 400},
		{name: "trailing garbage", body: `{} garbage`, wantCode: 400},
		{name: "NUL bytes", body: "{\x00}", wantCode: 400},
	}
	if base != "" {
		cases = append(cases,
			hostileCase{name: "valid body then garbage", body: base + "x", wantCode: 400},
			hostileCase{name: "valid body twice", body: base + base, wantCode: 400},
		)
		var first string
		d := json.NewDecoder(strings.NewReader(base))
		if _, err := d.Token(); err == nil {
			if k, err := d.Token(); err == nil {
				first = k.(string)
			}
		}
		cases = append(cases, hostileCase{name: "its first key again", body: strings.TrimSuffix(base, "}") + `,"` + first + `":null}`, wantCode: 400, wantField: first})
	}
	if !optional {
		cases = append(cases, hostileCase{name: "empty", body: "", wantCode: 400}, hostileCase{name: "blanks", body: " \n\t ", wantCode: 400})
	}
	if typ != nil {
		cases = append(cases, fieldCases(reflect.TypeOf(typ), base)...)
	}
	for i := range cases {
		cases[i].path = path
	}
	return cases
}

var hostileTimeType = reflect.TypeOf(time.Time{})

// fieldCases spoil one field of a valid body at a time: the wrong type, a
// number past int64 or not whole, a whole number past any range, a time
// far off, a string too long, a key twice inside it.
func fieldCases(t reflect.Type, base string) []hostileCase {
	var out []hostileCase
	var walk func(t reflect.Type, prefix []string, depth int)
	walk = func(t reflect.Type, prefix []string, depth int) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			p := append(slices.Clone(prefix), name)
			field := strings.Join(p, ".")
			set := func(caseName, raw string, code int, want string, mayPass bool) {
				out = append(out, hostileCase{name: field + ": " + caseName, body: setJSON(base, p, raw), wantCode: code, wantField: want, mayPass: mayPass})
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch {
			case ft == hostileTimeType:
				set("a number", `16`, 400, field, false)
				set("not a time", `"tomorrow"`, 400, field, false)
				set("year 9999", `"9999-12-31T23:59:59Z"`, 0, "*", false)
				set("year 1", `"0001-01-02T00:00:00Z"`, 0, "*", false)
				set("before 1970", `"1969-12-31T23:59:59Z"`, 0, "*", false)
				set("key twice inside", `{"a":1,"a":2}`, 400, field+".a", false)
			case ft.Kind() == reflect.Int || ft.Kind() == reflect.Int64:
				set("a string", `"1"`, 400, field, false)
				set("past int64", `9223372036854775808`, 400, field, false)
				set("below int64", `-9223372036854775809`, 400, field, false)
				set("an exponent past any", `1e400`, 400, field, false)
				set("not whole", `1.5`, 400, field, false)
				set("int64 maximum", `9223372036854775807`, 0, "*", false)
				set("int64 minimum", `-9223372036854775808`, 0, "*", false)
				set("overflows a duration in hours", `2562048`, 0, "*", false)
				set("negative", `-1`, 0, "*", false)
			case ft.Kind() == reflect.Bool:
				set("a string", `"yes"`, 400, field, false)
				set("a number", `1`, 400, field, false)
			case ft.Kind() == reflect.String:
				set("a number", `123`, 400, field, false)
				set("an object", `{"a":1,"a":2}`, 400, field+".a", false)
				set("an array", `[]`, 400, field, false)
				set("too long", strconv.Quote(strings.Repeat("a", 100000)), 0, "", false)
				set("a NUL", `"a\u0000b"`, 0, "", true)
			case ft.Kind() == reflect.Slice:
				set("an object", `{}`, 400, field, false)
				set("a key twice in an element", `[{"a":1,"a":2}]`, 400, field+"[0].a", false)
				wrong := `[123]`
				if reflect.PointerTo(ft).Implements(reflect.TypeFor[json.Unmarshaler]()) {
					wrong = `[true]` // a list of its own, which may take numbers (api.RetryOn)
				}
				set("elements of the wrong type", wrong, 400, field, false)
				set("many elements", "["+strings.Repeat(`"x",`, 50000)+`"x"]`, 0, "", false)
			case ft.Kind() == reflect.Struct && depth < 2:
				set("a string", `"x"`, 400, field, false)
				set("an array", `[]`, 400, field, false)
				walk(ft, p, depth+1)
			}
		}
	}
	walk(t, nil, 0)
	return out
}

// setJSON sets the value at path of a JSON object to raw (objects on the way
// made as needed).
func setJSON(base string, path []string, raw string) string {
	var top map[string]json.RawMessage
	if base != "" {
		_ = json.Unmarshal([]byte(base), &top)
	}
	if top == nil {
		top = map[string]json.RawMessage{}
	}
	if len(path) == 1 {
		top[path[0]] = json.RawMessage(raw)
	} else {
		top[path[0]] = json.RawMessage(setJSON(string(top[path[0]]), path[1:], raw))
	}
	// Written by hand: json.Marshal would check and compact raw.
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(k) + ":" + string(top[k]))
	}
	b.WriteByte('}')
	return b.String()
}

// hostileValues of query parameters.
var hostileValues = []string{"", "-1", "0", "99999999999999999999999", "9223372036854775808", "-9223372036854775809", "1e400", "NaN", "Inf",
	"\x00", "../../etc/passwd", strings.Repeat("a", 10000), "2026-13-45T99:99:99Z", "0001-01-02T00:00:00Z", "9999-12-31T23:59:59Z",
	"1969-12-31T23:59:59Z", "<script>alert(1)</script>", "' OR 1=1 --", "group:", "firing,resolved", strings.Repeat("queued,", 50000) + "queued"}

// queryCases are a GET route's hostile query parameters: each declared
// one, and one it does not declare, with every hostile value. A refusal
// with 400 or 422 names the parameter.
func queryCases(path string, r route) []hostileCase {
	names := []string{"hostile_undeclared"}
	for _, p := range r.Params {
		if p.In == "query" {
			names = append(names, p.Name)
		}
	}
	var out []hostileCase
	for _, n := range names {
		for _, v := range hostileValues {
			q := url.Values{n: {v}}
			if n == "after" && r.Path == "/v1/events" {
				q.Set("vm", "box") // a stream that ends soon
			}
			out = append(out, hostileCase{name: fmt.Sprintf("?%s=%.20q", n, v), path: path + "?" + q.Encode(), mayPass: true, wantField: queryField(n)})
		}
		// Twice, with different values.
		out = append(out, hostileCase{name: "?" + n + " twice", path: path + "?" + n + "=1&" + n + "=-1", mayPass: true, wantField: queryField(n)})
	}
	return out
}

// queryField is the field a refusal of a query parameter names; the ticket
// routes' refusals (no ticket) name none, nor the OpenID callback's (what
// the provider sends back is not the user's to correct).
func queryField(n string) string {
	if n == "hostile_undeclared" || n == "vm" || n == "state" || n == "code" {
		return ""
	}
	return n
}

// pathCases are a route's hostile path parameters: never found, never a
// change.
func pathCases(e *hostileEnv, r route) []hostileCase {
	if !strings.Contains(r.Path, "{") {
		return nil
	}
	var out []hostileCase
	for _, v := range []string{"../../../etc/passwd", "99999999999999999999", "-1", "0", "\x00", strings.Repeat("x", 300), "'; DROP TABLE vms; --", "%"} {
		tc := hostileCase{name: fmt.Sprintf("path %.20q", v), path: e.path(r, v), body: hostileBodies[r.Method+" "+r.Path].body}
		// The console's assets and page answer the unknown with 404; the
		// websockets refuse what has no ticket.
		if r.Status != http.StatusSwitchingProtocols && r.Auth != authNone && r.ContentType != "text/html" {
			tc.wantCode = http.StatusNotFound
		}
		if strings.HasPrefix(r.Path, "/v1/admin/gpus/") || strings.HasPrefix(r.Path, "/v1/admin/hosts/") ||
			r.Method == "PUT" && strings.HasPrefix(r.Path, "/v1/admin/images/uploads/") { // a chunk starts an upload: 400 or 404
			tc.wantCode = 0 // a GPU address that is not one: 400 or 404
		}
		out = append(out, tc)
	}
	return out
}

// headerCases are hostile header parameters.
func headerCases(path string, r route, body string) []hostileCase {
	var out []hostileCase
	for _, p := range r.Params {
		if p.In != "header" {
			continue
		}
		for i, v := range []string{strings.Repeat("k", 10000), "-1", "99999999999999999999", "\x7f"} {
			b := body
			if strings.Contains(b, `"name":`) {
				b = setJSON(b, []string{"name"}, strconv.Quote(fmt.Sprintf("header-%d", i))) // one that passes takes its name
			}
			out = append(out, hostileCase{name: fmt.Sprintf("header %s %.20q", p.Name, v), path: path, body: b, hdr: map[string]string{p.Name: v},
				mayPass: true, wantField: p.Name})
		}
	}
	if r.Path == "/v1/events" {
		for i := range out {
			out[i].path += "?vm=box"
		}
	}
	return out
}

// A client that left before its answer is no server error: 499 in the
// logs and metrics, not 500.
func TestClientThatLeftIsNoServerError(t *testing.T) {
	e := newHostileEnv(t)
	for _, path := range []string{"/v1/vms", "/v1/vms/box", "/v1/reservations", "/v1/usage"} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if rec := e.do(ctx, "GET", path, "ann-token", "", nil); rec.Code != StatusClientClosed {
			t.Errorf("GET %s with its client gone: %d %s, want %d", path, rec.Code, rec.Body, StatusClientClosed)
		}
	}
}

// documented reports whether the OpenAPI document lists code for r: its
// Errors, those its Auth implies, 408 for a POST's body, 400 for a query,
// and 404 for a
// path parameter that makes a path no route has.
func documented(r route, code int) bool {
	switch {
	case slices.Contains(r.Errors, code):
		return true
	case code == http.StatusUnauthorized && r.Auth != authNone,
		code == http.StatusForbidden && (r.Auth == authAdmin || r.Auth == authTicket),
		code == http.StatusRequestTimeout && r.Method == http.MethodPost,
		code == http.StatusBadRequest,                                // a query that does not parse, on every route
		code == http.StatusNotFound && strings.Contains(r.Path, "{"): // a hostile path parameter can name no route
		return true
	}
	return false
}
