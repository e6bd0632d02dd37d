package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// recorded is what a fake server saw of one request.
type recorded struct {
	method, path, query, auth, idem, ctype string
	body                                   string
}

// fakeServer answers every request with status and body, recording it.
func fakeServer(t *testing.T, status int, ctype, body string) (*Client, *recorded) {
	t.Helper()
	rec := &recorded{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		*rec = recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), r.Header.Get("Idempotency-Key"),
			r.Header.Get("Content-Type"), string(b)}
		if ctype != "" {
			w.Header().Set("Content-Type", ctype)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL+"/prefix/", "tok")
	if err != nil {
		t.Fatal(err)
	}
	return c, rec
}

func TestMethods(t *testing.T) {
	ctx := context.Background()
	vmJSON := `{"id":"v1","name":"box","owner":"ann","profile":"seat","state":"queued","hours":2,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05Z"}`
	opJSON := `{"id":"o1","vm_id":"v1","kind":"delete","state":"pending","created_at":"2026-01-02T03:04:05Z"}`
	tests := []struct {
		name         string
		call         func(c *Client) (any, error)
		answer       string
		method, path string
		query, body  string
		idem         string
		check        func(t *testing.T, got any)
	}{
		{
			name:   "list profiles",
			call:   func(c *Client) (any, error) { return c.ListProfiles(ctx) },
			answer: `[{"name":"seat","vcpus":2,"memory":1073741824,"gpu":{"kind":"mig","profile":"3g.40gb","count":1,"memory":42949672960},"lease":{"default":7200,"max":28800,"idle_stop":0},"class":"interactive","extra":{"x":1}}]`,
			method: "GET", path: "/prefix/v1/profiles",
			check: func(t *testing.T, got any) {
				ps := got.([]Profile)
				if len(ps) != 1 || ps[0].Name != "seat" || ps[0].GPU.Profile != "3g.40gb" || ps[0].Lease.Max != 28800 || ps[0].Memory != 1<<30 {
					t.Errorf("%+v", ps)
				}
				// Raw round-trips what the server sent, unknown fields too.
				b, _ := json.Marshal(ps[0])
				if !strings.Contains(string(b), `"extra":{"x":1}`) {
					t.Errorf("marshalled %s", b)
				}
			},
		},
		{
			name:   "get profile",
			call:   func(c *Client) (any, error) { return c.GetProfile(ctx, "a b") },
			answer: `{"name":"a b"}`,
			method: "GET", path: "/prefix/v1/profiles/a b",
			check: func(t *testing.T, got any) {
				if got.(*Profile).Name != "a b" {
					t.Errorf("%+v", got)
				}
			},
		},
		{
			name: "create VM",
			call: func(c *Client) (any, error) {
				return c.CreateVM(ctx, api.CreateVMRequest{Profile: "seat", Name: "box", Hours: 2, SSHKeys: []string{"ssh-ed25519 A"}}, "key-1")
			},
			answer: `{"vm":` + vmJSON + `,"operation":{"id":"o0","vm_id":"v1","kind":"create","state":"pending","created_at":"2026-01-02T03:04:05Z"}}`,
			method: "POST", path: "/prefix/v1/vms", idem: "key-1",
			body: `{"profile":"seat","name":"box","hours":2,"ssh_keys":["ssh-ed25519 A"]}`,
			check: func(t *testing.T, got any) {
				r := got.(*api.CreateVMResponse)
				if r.VM.ID != "v1" || r.Operation.Kind != "create" {
					t.Errorf("%+v", r)
				}
			},
		},
		{
			name: "list VMs",
			call: func(c *Client) (any, error) {
				return c.ListVMs(ctx, ListVMsOptions{States: []string{"running", "queued"}, Limit: 5, After: "c1"})
			},
			answer: `{"items":[` + vmJSON + `],"next":"c2"}`,
			method: "GET", path: "/prefix/v1/vms", query: "after=c1&limit=5&state=running%2Cqueued",
			check: func(t *testing.T, got any) {
				l := got.(*api.VMList)
				if len(l.Items) != 1 || l.Next != "c2" || l.Items[0].Name != "box" {
					t.Errorf("%+v", l)
				}
			},
		},
		{
			name:   "get VM",
			call:   func(c *Client) (any, error) { return c.GetVM(ctx, "box") },
			answer: vmJSON,
			method: "GET", path: "/prefix/v1/vms/box",
			check: func(t *testing.T, got any) {
				if vm := got.(*api.VM); vm.ID != "v1" || vm.CreatedAt.Year() != 2026 {
					t.Errorf("%+v", vm)
				}
			},
		},
		{
			name:   "delete VM",
			call:   func(c *Client) (any, error) { return c.DeleteVM(ctx, "v1") },
			answer: `{"operation":` + opJSON + `}`,
			method: "DELETE", path: "/prefix/v1/vms/v1",
			check: func(t *testing.T, got any) {
				if op := got.(*api.Operation); op.ID != "o1" || op.Kind != "delete" {
					t.Errorf("%+v", op)
				}
			},
		},
		{
			name:   "get operation",
			call:   func(c *Client) (any, error) { return c.GetOperation(ctx, "o1") },
			answer: opJSON,
			method: "GET", path: "/prefix/v1/operations/o1",
			check: func(t *testing.T, got any) {
				if op := got.(*api.Operation); op.VMID != "v1" {
					t.Errorf("%+v", op)
				}
			},
		},
		{
			name:   "GPUs",
			call:   func(c *Client) (any, error) { return c.GPUs(ctx) },
			answer: `{"host":"h","simulated":true,"backends":["vgpu"],"gpus":[{"address":"0000:41:00.0","model":"A40"}],"devices":[]}`,
			method: "GET", path: "/prefix/v1/gpus",
			check: func(t *testing.T, got any) {
				if hi := got.(*api.HostInventory); !hi.Simulated || len(hi.GPUs) != 1 || hi.GPUs[0].Model != "A40" {
					t.Errorf("%+v", hi)
				}
			},
		},
		{
			name:   "reload",
			call:   func(c *Client) (any, error) { return c.Reload(ctx) },
			answer: `{"config":"/etc/gpuvm: 2 files, 3 profiles","diagnostics":"w"}`,
			method: "POST", path: "/prefix/v1/admin/reload",
			check: func(t *testing.T, got any) {
				if r := got.(*ReloadResult); r.Config != "/etc/gpuvm: 2 files, 3 profiles" || r.Diagnostics != "w" {
					t.Errorf("%+v", r)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, rec := fakeServer(t, 200, "application/json", tc.answer)
			got, err := tc.call(c)
			if err != nil {
				t.Fatal(err)
			}
			if rec.method != tc.method || rec.path != tc.path || rec.query != tc.query || rec.auth != "Bearer tok" || rec.idem != tc.idem {
				t.Errorf("request %+v", rec)
			}
			if tc.body != "" && (rec.body != tc.body || rec.ctype != "application/json") {
				t.Errorf("body %q (%s), want %q", rec.body, rec.ctype, tc.body)
			}
			if tc.body == "" && rec.body != "" {
				t.Errorf("unexpected body %q", rec.body)
			}
			tc.check(t, got)
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name          string
		status        int
		ctype, body   string
		is            func(error) bool
		title, detail string
		kind          string
	}{
		{"not found", 404, "application/problem+json", `{"type":"https://gpuvm.dev/problems/not-found","title":"Not found","status":404,"detail":"no VM \"x\""}`,
			IsNotFound, "Not found", `no VM "x"`, "not-found"},
		{"unauthenticated", 401, "application/problem+json", `{"type":"https://gpuvm.dev/problems/unauthenticated","title":"Authentication required","status":401,"detail":"send a token"}`,
			IsUnauthenticated, "Authentication required", "send a token", "unauthenticated"},
		{"forbidden", 403, "application/problem+json", `{"type":"https://gpuvm.dev/problems/forbidden","title":"Not allowed","status":403}`,
			IsForbidden, "Not allowed", "", "forbidden"},
		{"conflict", 409, "application/problem+json", `{"type":"https://gpuvm.dev/problems/conflict","title":"Conflict","status":409,"field":"name"}`,
			IsConflict, "Conflict", "", "conflict"},
		{"validation", 422, "application/problem+json", `{"type":"https://gpuvm.dev/problems/validation","title":"The request is not valid","status":422,"field":"hours","detail":"too many"}`,
			IsValidation, "The request is not valid", "too many", "validation"},
		{"unavailable", 503, "application/problem+json", `{"type":"https://gpuvm.dev/problems/unavailable","title":"Temporarily unavailable","status":503}`,
			IsUnavailable, "Temporarily unavailable", "", "unavailable"},
		// Not problem+json: a proxy's page. The status decides.
		{"proxy 404", 404, "text/html", `<html>nope</html>`, IsNotFound, "Not Found", "<html>nope</html>", ""},
		{"proxy 502", 502, "text/html", `<html>bad gateway</html>`, func(err error) bool { return !IsNotFound(err) && !IsUnreachable(err) },
			"Bad Gateway", "bad gateway", ""},
		{"empty 401", 401, "", ``, IsUnauthenticated, "Unauthorized", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := fakeServer(t, tc.status, tc.ctype, tc.body)
			_, err := c.GetVM(context.Background(), "x")
			p, ok := AsProblem(err)
			if !ok {
				t.Fatalf("%T %v is not a *Problem", err, err)
			}
			if !tc.is(err) || p.Status != tc.status || p.Title != tc.title || !strings.Contains(p.Detail, tc.detail) || p.Kind() != tc.kind {
				t.Errorf("%+v", p)
			}
			if !strings.HasSuffix(p.URL, "/prefix/v1/vms/x") || p.Method != "GET" {
				t.Errorf("request %s %s", p.Method, p.URL)
			}
			if IsUnreachable(err) {
				t.Error("a problem is not a transport error")
			}
		})
	}
	// Field and diagnostics come through.
	c, _ := fakeServer(t, 422, "application/problem+json", `{"type":"https://gpuvm.dev/problems/invalid-configuration","title":"The configuration has errors","status":422,"detail":"nothing changed","diagnostics":"x.hcl:1:1: bad"}`)
	_, err := c.Reload(context.Background())
	if p, _ := AsProblem(err); p == nil || p.Diagnostics != "x.hcl:1:1: bad" || !errors.Is(err, ErrInvalidConfig) || IsValidation(err) {
		t.Errorf("%#v", err)
	}
	if err.Error() != "The configuration has errors: nothing changed" {
		t.Errorf("text %q", err)
	}
}

func TestTransportErrors(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	c, err := New(addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ListProfiles(context.Background())
	var te *TransportError
	if !errors.As(err, &te) || !IsUnreachable(err) || te.URL != addr+"/v1/profiles" || !strings.Contains(err.Error(), addr+"/v1/profiles") {
		t.Fatalf("%T %v", err, err)
	}
	// 200 with something that is not JSON.
	c, _ = fakeServer(t, 200, "text/html", "<html>")
	if _, err := c.GetVM(context.Background(), "x"); !IsUnreachable(err) || !strings.Contains(err.Error(), "not the JSON expected") {
		t.Errorf("%v", err)
	}
	// A cancelled context is the context's error, not a transport error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.GetVM(ctx, "x"); !errors.Is(err, context.Canceled) || IsUnreachable(err) {
		t.Errorf("%T %v", err, err)
	}
}

func TestParseURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://gpu.example:8443/":    "https://gpu.example:8443",
		"gpu.example":                  "https://gpu.example",
		"http://127.0.0.1:8080/gpuvm/": "http://127.0.0.1:8080/gpuvm",
		"":                             "",
		"ftp://x":                      "",
		"http://":                      "",
		"http://x/?a=b":                "",
	} {
		u, err := ParseURL(in)
		switch {
		case want == "" && err == nil:
			t.Errorf("%q: accepted as %s", in, u)
		case want != "" && (err != nil || u.String() != want):
			t.Errorf("%q: %v %v, want %s", in, u, err, want)
		}
	}
}

func TestListAllVMs(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		switch r.URL.Query().Get("after") {
		case "":
			io.WriteString(w, `{"items":[{"id":"a"},{"id":"b"}],"next":"n1"}`)
		case "n1":
			io.WriteString(w, `{"items":[{"id":"c"}]}`)
		default:
			w.WriteHeader(400)
		}
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "")
	vms, err := c.ListAllVMs(context.Background(), ListVMsOptions{})
	if err != nil || len(vms) != 3 || vms[2].ID != "c" || calls.Load() != 2 {
		t.Errorf("%v %+v %d", err, vms, calls.Load())
	}
}

// scripted answers GET /v1/vms/{id} with the next VM of a script (the last
// one forever); an empty State answers 503.
func scripted(t *testing.T, script []api.VM) (*Client, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" { // a server without the event stream: WaitVM polls
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(404)
			io.WriteString(w, `{"type":"https://gpuvm.dev/problems/not-found","title":"Not found","status":404,"detail":"no route GET /v1/events"}`)
			return
		}
		i := int(n.Add(1)) - 1
		vm := script[min(i, len(script)-1)]
		if vm.State == "" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(503)
			io.WriteString(w, `{"type":"https://gpuvm.dev/problems/unavailable","title":"Temporarily unavailable","status":503}`)
			return
		}
		json.NewEncoder(w).Encode(vm)
	}))
	t.Cleanup(srv.Close)
	c, _ := New(srv.URL, "tok")
	c.PollMin, c.PollMax = time.Millisecond, 4*time.Millisecond
	return c, &n
}

func TestWaitVM(t *testing.T) {
	q := api.VM{ID: "v", State: "queued", Phase: "waiting for a GPU"}
	qr := api.VM{ID: "v", State: "queued", Phase: "waiting for a GPU", Reason: "no free capacity"}
	al := api.VM{ID: "v", State: "allocating", Phase: "allocating GPU"}
	cr := api.VM{ID: "v", State: "creating", Phase: "preparing disk"}
	run := api.VM{ID: "v", State: "running", Phase: "ready"}
	failed := api.VM{ID: "v", State: "failed", Reason: "no such image"}
	down := api.VM{}
	tests := []struct {
		name    string
		script  []api.VM
		want    []string // states:phase:reason seen
		final   string
		wantErr bool
	}{
		{"to running", []api.VM{q, q, qr, qr, al, cr, cr, run}, []string{"queued:waiting for a GPU:", "queued:waiting for a GPU:no free capacity", "allocating:allocating GPU:", "creating:preparing disk:", "running:ready:"}, "running", false},
		{"already running", []api.VM{run}, []string{"running:ready:"}, "running", false},
		{"fails", []api.VM{q, al, failed}, []string{"queued:waiting for a GPU:", "allocating:allocating GPU:", "failed::no such image"}, "failed", false},
		{"server blips", []api.VM{q, down, down, al, run}, []string{"queued:waiting for a GPU:", "allocating:allocating GPU:", "running:ready:"}, "running", false},
		{"server gone", []api.VM{q, down}, []string{"queued:waiting for a GPU:"}, "queued", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := scripted(t, tc.script)
			var seen []string
			vm, err := c.WaitVM(context.Background(), "v", func(vm api.VM) { seen = append(seen, vm.State+":"+vm.Phase+":"+vm.Reason) })
			if (err != nil) != tc.wantErr || vm == nil || vm.State != tc.final || !reflect.DeepEqual(seen, tc.want) {
				t.Errorf("err %v, vm %+v, seen %q", err, vm, seen)
			}
			if tc.wantErr && !IsUnavailable(err) {
				t.Errorf("error %v is not the last problem", err)
			}
		})
	}
}

func TestWaitVMHonoursContext(t *testing.T) {
	c, n := scripted(t, []api.VM{{ID: "v", State: "queued"}})
	c.PollMin, c.PollMax = 10*time.Millisecond, 20*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	vm, err := c.WaitVM(ctx, "v", nil)
	if !errors.Is(err, context.DeadlineExceeded) || vm == nil || vm.State != "queued" {
		t.Errorf("%v %+v", err, vm)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
	// Backoff: far fewer polls than 100ms/10ms would give without it... but
	// more than one.
	if got := n.Load(); got < 2 || got > 10 {
		t.Errorf("%d polls", got)
	}
	// Not found ends the wait at once.
	c2, _ := fakeServer(t, 404, "application/problem+json", `{"type":"https://gpuvm.dev/problems/not-found","title":"Not found","status":404}`)
	c2.PollMin = time.Millisecond
	if _, err := c2.WaitVM(context.Background(), "v", nil); !IsNotFound(err) {
		t.Errorf("%v", err)
	}
}

func TestWaitOperation(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		states := []string{`"state":"pending"`, `"state":"running","step":"delete domain"`, `"state":"running","step":"release GPU"`, `"state":"done"`}
		i := min(int(n.Add(1))-1, len(states)-1)
		io.WriteString(w, `{"id":"o","kind":"delete",`+states[i]+`}`)
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "tok")
	c.PollMin, c.PollMax = time.Millisecond, time.Millisecond
	var steps []string
	op, err := c.WaitOperation(context.Background(), "o", func(op api.Operation) { steps = append(steps, op.State+":"+op.Step) })
	if err != nil || op.State != "done" || strings.Join(steps, ",") != "pending:,running:delete domain,running:release GPU,done:" {
		t.Errorf("%v %+v %q", err, op, steps)
	}
}
