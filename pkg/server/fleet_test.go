package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// fleetStub is the fleet of the tests: it names the leader.
type fleetStub struct{ leader string }

func (f fleetStub) LeaderName(context.Context) (string, error) { return f.leader, nil }

// fleetEnv is the admin env as node h1 of a fleet, with node h2 at
// h2URL and a VM of ann running on h2.
func fleetEnv(t *testing.T, h2URL string) (*adminEnv, *store.VM) {
	t.Helper()
	e := newAdminEnv(t)
	e.s.Fleet = fleetStub{leader: "h2"}
	// This node's hypervisor knows no VM of h2's: only a forwarded
	// request reaches its display.
	e.s.Consoles = &fakeConsoles{conErr: errors.New("the local hypervisor was asked"), addrErr: errors.New("the local hypervisor was asked")}
	ctx := context.Background()
	for _, h := range []store.Host{{Name: "h1", APIURL: "http://h1.invalid"}, {Name: "h2", APIURL: h2URL}} {
		if err := e.st.RegisterHost(ctx, &h); err != nil {
			t.Fatal(err)
		}
	}
	vm := &store.VM{Name: "far", Owner: "ann", Profile: "p", State: store.VMRunning, Host: "h2", Hours: 1}
	if _, err := e.st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	return e, vm
}

// Draining a node stops placements there and says plainly that the VMs
// on it stay; undraining ends it; only admins may; unknown nodes are 404.
func TestHostDrainRoutes(t *testing.T) {
	e, vm := fleetEnv(t, "http://h2.invalid")
	var st api.HostDrainState
	if code, body := e.call(t, "POST", "/v1/admin/hosts/h2/drain", e.admin, "", &st); code != 200 {
		t.Fatalf("drain: %d %v", code, body)
	}
	if st.Host != "h2" || st.State != store.HostDraining || len(st.VMs) != 1 || st.VMs[0] != "ann/"+vm.Name ||
		!strings.Contains(st.Message, "cannot move") || !strings.Contains(st.Message, "local to h2") {
		t.Errorf("drain answered %+v", st)
	}
	if h, _ := e.st.GetHost(context.Background(), "h2"); h.State != store.HostDraining {
		t.Errorf("h2 is %s after the drain", h.State)
	}
	if e.worker.n.Load() == 0 {
		t.Error("the drain did not wake the worker")
	}
	// Draining again is idempotent.
	if code, body := e.call(t, "POST", "/v1/admin/hosts/h2/drain", e.admin, "", &st); code != 200 || st.State != store.HostDraining {
		t.Fatalf("drain again: %d %v %+v", code, body, st)
	}
	// A drained node with no VM says so.
	if code, body := e.call(t, "POST", "/v1/admin/hosts/h1/drain", e.admin, "", &st); code != 200 || len(st.VMs) != 0 || !strings.Contains(st.Message, "none is on it") {
		t.Fatalf("drain h1: %d %v %+v", code, body, st)
	}

	for _, tc := range []struct {
		name, method, path, token string
		status                    int
		problem, detail           string
	}{
		{"user drains", "POST", "/v1/admin/hosts/h2/drain", e.ann, 403, "forbidden", ""},
		{"unknown node", "POST", "/v1/admin/hosts/h9/drain", e.admin, 404, "not-found", "the nodes are h1, h2"},
		{"unknown node undrained", "DELETE", "/v1/admin/hosts/h9/drain", e.admin, 404, "not-found", "no node is named"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.call(t, tc.method, tc.path, tc.token, "", nil)
			if code != tc.status || body["type"] != ProblemBase+tc.problem || !strings.Contains(body["detail"].(string), tc.detail) {
				t.Errorf("%d %v; want %d %s with %q", code, body, tc.status, tc.problem, tc.detail)
			}
		})
	}

	if code, body := e.call(t, "DELETE", "/v1/admin/hosts/h2/drain", e.admin, "", &st); code != 200 || st.State != store.HostUp || !strings.Contains(st.Message, "takes VMs again") {
		t.Fatalf("undrain: %d %v %+v", code, body, st)
	}
	code, body := e.call(t, "DELETE", "/v1/admin/hosts/h2/drain", e.admin, "", nil)
	if code != 404 || !strings.Contains(body["detail"].(string), "is not drained") {
		t.Errorf("undrain of an undrained node: %d %v", code, body)
	}
}

// VMs show their node's state; a node silent past the timeout is down,
// and GET /v1/hosts marks the leader.
func TestVMHostState(t *testing.T) {
	e, vm := fleetEnv(t, "http://h2.invalid")
	e.s.HostTimeout = 3 * time.Second
	get := func() (api.VM, api.VM) {
		t.Helper()
		var one api.VM
		if code, body := e.call(t, "GET", "/v1/vms/"+vm.ID, e.ann, "", &one); code != 200 {
			t.Fatalf("%d %v", code, body)
		}
		var list api.VMList
		if code, body := e.call(t, "GET", "/v1/vms", e.ann, "", &list); code != 200 || len(list.Items) != 1 {
			t.Fatalf("%d %v %+v", code, body, list)
		}
		return one, list.Items[0]
	}
	if one, listed := get(); one.HostState != store.HostUp || listed.HostState != store.HostUp {
		t.Errorf("host_state %q / %q, want up", one.HostState, listed.HostState)
	}
	e.clock.Advance(4 * time.Second) // no heartbeat since
	if one, listed := get(); one.HostState != store.HostDown || listed.HostState != store.HostDown || one.State != store.VMRunning {
		t.Errorf("after the timeout: %s, host_state %q / %q, want running on a down host", one.State, one.HostState, listed.HostState)
	}
	var hosts api.HostList
	if code, body := e.call(t, "GET", "/v1/hosts", e.ann, "", &hosts); code != 200 {
		t.Fatalf("%d %v", code, body)
	}
	for _, h := range hosts.Items {
		if h.Leader != (h.Name == "h2") || h.State != store.HostDown {
			t.Errorf("host %s: leader %v, state %s", h.Name, h.Leader, h.State)
		}
	}
}

// The console and tunnel of a VM on another node go to that node's gpuvmd
// as they came: path, credentials, the client's Host; a websocket through
// is a websocket end to end, and its ticket is left for the owner to spend.
func TestForwardToOwner(t *testing.T) {
	var mu sync.Mutex
	var seen []*http.Request
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Clone(context.Background()))
		mu.Unlock()
		if r.URL.Path == consoleWSPath || r.URL.Path == tunnelUDPWSPath {
			ws, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer ws.CloseNow()
			typ, b, err := ws.Read(r.Context())
			if err == nil {
				_ = ws.Write(r.Context(), typ, append([]byte("owner: "), b...))
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"answered_by":"h2"}`)
	}))
	defer owner.Close()
	e, vm := fleetEnv(t, owner.URL)
	e.s.HostTimeout = time.Minute
	front := httptest.NewServer(e.s)
	defer front.Close()
	call := func(method, path string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, front.URL+path, strings.NewReader(`{"port":22}`))
		req.Header.Set("Authorization", "Bearer "+e.ann)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := front.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/v1/vms/" + vm.ID + "/console", "/v1/vms/" + vm.ID + "/console.vv", "/v1/vms/" + vm.ID + "/tunnel"} {
		method := "GET"
		if strings.HasSuffix(path, "/tunnel") {
			method = "POST"
		}
		code, body := call(method, path)
		if code != 200 || !strings.Contains(body, "answered_by") {
			t.Errorf("%s %s: %d %s", method, path, code, body)
			continue
		}
		mu.Lock()
		r := seen[len(seen)-1]
		mu.Unlock()
		if r.URL.Path != path || r.Header.Get("Authorization") != "Bearer "+e.ann || r.Header.Get(forwardedHeader) != "h1" ||
			r.Host != strings.TrimPrefix(front.URL, "http://") || r.Header.Get("X-Forwarded-For") == "" || r.Header.Get("X-Request-ID") == "" {
			t.Errorf("%s reached the owner as %s %s, host %s, headers %v", path, r.Method, r.URL, r.Host, r.Header)
		}
	}
	// The owner records what it answers; the node that proxied records
	// nothing.
	audited := func() []string {
		t.Helper()
		es, _, err := e.st.ListAudit(context.Background(), store.AuditFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range es {
			out = append(out, fmt.Sprintf("%s %s %d", x.Action, x.Outcome, x.Status))
		}
		return out
	}
	if got := audited(); len(got) != 0 {
		t.Errorf("the proxying node recorded %v", got)
	}
	// A request another node forwarded is not forwarded again.
	if code, body := call("GET", "/v1/vms/"+vm.ID+"/console", forwardedHeader, "h3"); code != 502 || !strings.Contains(body, "disagree") {
		t.Errorf("a forwarded request: %d %s", code, body)
	}
	if got := audited(); !slices.Equal(got, []string{"console.ticket failed 502"}) {
		t.Errorf("a refused forward is recorded here: %v", got)
	}

	// The websocket of a ticket, through h1 to h2.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ticket, err := e.st.IssueTicket(ctx, &store.ConsoleTicket{VMID: vm.ID, User: "ann", Kind: store.TicketConsole}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(front.URL, "http")+consoleWSPath+ticketQuery(vm.ID, ticket), nil)
	if err != nil {
		t.Fatalf("websocket through h1: %v", err)
	}
	if err := ws.Write(ctx, websocket.MessageBinary, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := ws.Read(ctx); err != nil || string(b) != "owner: hello" {
		t.Errorf("read %q, %v", b, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")
	if _, err := e.st.PeekTicket(ctx, ticket); err != nil {
		t.Errorf("h1 spent or lost the ticket it forwarded: %v", err)
	}
	if got := audited(); len(got) != 1 {
		t.Errorf("a forwarded websocket is recorded by the node that proxied it: %v", got)
	}
	// A UDP tunnel's websocket, too: its datagrams are messages.
	udp, err := e.st.IssueTicket(ctx, &store.ConsoleTicket{VMID: vm.ID, User: "ann", Kind: store.TicketTunnel, Port: 47998, Protocol: store.ProtocolUDP}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(front.URL, "http")+tunnelUDPWSPath+ticketQuery(vm.ID, udp), nil)
	if err != nil {
		t.Fatalf("UDP tunnel through h1: %v", err)
	}
	if err := ws.Write(ctx, websocket.MessageBinary, []byte("datagram")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := ws.Read(ctx); err != nil || string(b) != "owner: datagram" {
		t.Errorf("read %q, %v", b, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")
	if _, err := e.st.PeekTicket(ctx, udp); err != nil {
		t.Errorf("h1 spent or lost the UDP ticket it forwarded: %v", err)
	}

	// A node that is down is said to be down.
	e.clock.Advance(2 * time.Minute)
	if code, body := call("GET", "/v1/vms/"+vm.ID+"/console"); code != 503 || !strings.Contains(body, "is down") {
		t.Errorf("console on a down node: %d %s", code, body)
	}
}

// A node that does not answer is a 502 that names it.
func TestForwardToOwnerUnreachable(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	e, vm := fleetEnv(t, url)
	e.s.HostTimeout = time.Minute
	front := httptest.NewServer(e.s)
	defer front.Close()
	req, _ := http.NewRequest("GET", front.URL+"/v1/vms/"+vm.ID+"/console", nil)
	req.Header.Set("Authorization", "Bearer "+e.ann)
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("not a problem: %v %s", err, resp.Header)
	}
	if resp.StatusCode != 502 || !strings.Contains(p["detail"].(string), "node h2") || !strings.Contains(p["detail"].(string), url) {
		t.Errorf("%d %v", resp.StatusCode, p)
	}
	// No node answered: this one records it.
	es, _, err := e.st.ListAudit(context.Background(), store.AuditFilter{})
	if err != nil || len(es) != 1 || es[0].Action != "console.ticket" || es[0].Outcome != store.AuditFailed || es[0].Status != 502 || es[0].User != "ann" {
		t.Errorf("audit %+v, %v", es, err)
	}
}
