package server

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

func TestEventStreamWire(t *testing.T) {
	s, _, _ := vmServer(t)
	s.eventKeepAlive = 20 * time.Millisecond
	s.hub = newEventHub(s.Store, 5*time.Millisecond, s.log)
	srv := httptest.NewServer(s)
	defer srv.Close()

	for _, tc := range []struct{ name, query, header, field string }{
		{"after not a number", "?after=x", "", "after"},
		{"after negative", "?after=-3", "", "after"},
		{"bad Last-Event-ID", "", "seven", "Last-Event-ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/v1/events"+tc.query, nil)
			req.Header.Set("Authorization", "Bearer ann-token")
			if tc.header != "" {
				req.Header.Set("Last-Event-ID", tc.header)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != 422 || !strings.Contains(rec.Body.String(), `"field":"`+tc.field+`"`) {
				t.Errorf("%d %s", rec.Code, rec.Body)
			}
		})
	}

	req, _ := http.NewRequest("GET", srv.URL+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer ann-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, ct)
	}
	r := bufio.NewReader(resp.Body)
	first, _ := r.ReadString('\n')
	if !strings.HasPrefix(first, ": gpuvm events after 0") {
		t.Errorf("first line %q", first)
	}
	// An event as the wire format has it.
	rec, _ := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"w"}`)
	if rec.Code != 202 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	var lines []string
	keepAlives := 0
	for len(lines) < 3 || keepAlives == 0 {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", lines, err)
		}
		switch l = strings.TrimSuffix(l, "\n"); {
		case l == ": keep-alive":
			keepAlives++
		case l != "" && !strings.HasPrefix(l, "retry:"):
			lines = append(lines, l)
		}
	}
	if lines[0] != "id: 1" || lines[1] != "event: vm.created" || !strings.HasPrefix(lines[2], `data: {"id":1,`) || !strings.Contains(lines[2], `"owner":"ann"`) {
		t.Errorf("event lines %q", lines)
	}
	// Close ends the stream: the body reaches its end.
	s.Close()
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, r); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("stream ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream stayed open after Close")
	}
}

// sseEvents reads n events of a stream (keep-alives and comments skipped).
func sseEvents(t *testing.T, r *bufio.Reader, n int) []api.Event {
	t.Helper()
	var es []api.Event
	for len(es) < n {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d events: %v", len(es), err)
		}
		if d, ok := strings.CutPrefix(strings.TrimSuffix(l, "\n"), "data: "); ok {
			var e api.Event
			if err := json.Unmarshal([]byte(d), &e); err != nil {
				t.Fatalf("%q: %v", d, err)
			}
			es = append(es, e)
		}
	}
	return es
}

// The streams share the hub's reads: with the poll an hour, only the
// store's commit wakes it; one read for each event, whatever the number of
// streams, and each stream gets what it may see, in order. A stream
// resumed from before where the hub started reads the database.
func TestEventStreamsShareReads(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t)
	count := &countingEvents{Store: st, st: st}
	users := fakeAuth{"admin-token": {Name: "admin", Admin: true}, "ann-token": {Name: "ann"}, "bob-token": {Name: "bob"}}
	vms := map[string]*store.VM{}
	for _, u := range users {
		if err := st.CreateUser(ctx, &store.User{Name: u.Name, Admin: u.Admin}); err != nil {
			t.Fatal(err)
		}
		vm := &store.VM{Name: "w", Owner: u.Name, Profile: "seat", Hours: 2, Spec: "{}"}
		if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: u.Name}); err != nil {
			t.Fatal(err)
		}
		vms[u.Name] = vm
	}
	s := newServer(t, Deps{Auth: users, Backends: fakeBackends{}, Config: &fakeConfig{cfg: estimateConfig(t, "8h")}, Store: count,
		EventPoll: time.Hour, EventKeepAlive: time.Hour})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close) // after the streams' bodies are closed
	open := func(token, query, lastID string) *bufio.Reader {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/events"+query, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /v1/events%s: %v %v", query, resp, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		r := bufio.NewReader(resp.Body)
		if l, _ := r.ReadString('\n'); !strings.HasPrefix(l, ": gpuvm events after "+cmp.Or(lastID, "3")+"\n") {
			t.Fatalf("first line %q", l)
		}
		return r
	}
	var ann []*bufio.Reader
	for range 5 {
		ann = append(ann, open("ann-token", "", ""))
	}
	bob, admin, annVM := open("bob-token", "", ""), open("admin-token", "", ""), open("admin-token", "?vm="+vms["ann"].ID, "")
	time.Sleep(100 * time.Millisecond) // the hub has read where it starts
	q0 := count.queries.Load()
	for i := range 6 {
		who := []string{"ann", "bob"}[i%2]
		vm, err := st.UpdateVMState(ctx, vms[who].ID, vms[who].Version, store.VMUpdate{State: store.VMRunning, Phase: fmt.Sprint("p", i)})
		if err != nil {
			t.Fatal(err)
		}
		vms[who] = vm
		time.Sleep(5 * time.Millisecond)
	}
	check := func(name string, r *bufio.Reader, n int, owner, vmID string) {
		t.Helper()
		last := int64(3)
		for _, e := range sseEvents(t, r, n) {
			if e.ID <= last || (owner != "" && e.Owner != owner) || (vmID != "" && e.VMID != vmID) {
				t.Errorf("%s: after %d, %+v", name, last, e)
			}
			last = e.ID
		}
	}
	for _, r := range ann {
		check("ann", r, 3, "ann", "")
	}
	check("bob", bob, 3, "bob", "")
	check("admin", admin, 6, "", "")
	check("admin ?vm=ann's", annVM, 3, "ann", vms["ann"].ID)
	if q := count.queries.Load() - q0; q > 6 {
		t.Errorf("%d queries for 6 events and 8 streams, want at most 6", q)
	}
	// ann's stream that saw only its creation (event 1 or 2 or 3) goes on.
	old := open("ann-token", "", "0")
	for _, e := range sseEvents(t, old, 4) {
		if e.Owner != "ann" {
			t.Errorf("resumed: %+v", e)
		}
	}
	// Another user's events never reach ann's streams: a last one of
	// hers comes next.
	if _, err := st.UpdateVMState(ctx, vms["bob"].ID, vms["bob"].Version, store.VMUpdate{State: store.VMStopped}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateVMState(ctx, vms["ann"].ID, vms["ann"].Version, store.VMUpdate{State: store.VMStopped}); err != nil {
		t.Fatal(err)
	}
	for _, r := range append(ann, old) {
		if e := sseEvents(t, r, 1)[0]; e.Owner != "ann" || e.ID != 11 {
			t.Errorf("ann's next: %+v", e)
		}
	}
}

// sliceEvents is an EventSource over events in memory.
type sliceEvents []store.Event

func (s sliceEvents) LastEventID(context.Context) (int64, error) {
	if len(s) == 0 {
		return 0, nil
	}
	return s[len(s)-1].ID, nil
}

func (s sliceEvents) ListEventsSince(_ context.Context, after int64, f store.EventFilter) ([]store.Event, error) {
	var es []store.Event
	for _, e := range s {
		if e.ID > after && len(es) < f.Limit {
			es = append(es, e)
		}
	}
	return es, nil
}

// The hub keeps the newest events, from twice keep down to keep: a stream
// further behind is told to read the database.
func TestEventHubKeeps(t *testing.T) {
	var src sliceEvents
	h := newEventHub(&src, time.Hour, slog.New(slog.DiscardHandler))
	h.keep = 3
	h.gen = 1 // as subscribe would, without the poller
	ctx := context.Background()
	if err := h.read(ctx, 1); err != nil || !h.ready || h.base != 0 {
		t.Fatalf("first read: %v, ready %v base %d", err, h.ready, h.base)
	}
	for i := range 7 {
		src = append(src, store.Event{ID: int64(i + 1), Owner: []string{"ann", "bob"}[i%2], Type: "vm.state", Payload: store.JSON("{}")})
	}
	if err := h.read(ctx, 1); err != nil {
		t.Fatal(err)
	}
	es, upTo, _, ok := h.since(2, store.EventFilter{Owner: "ann"})
	if h.base != 4 || len(h.recent) != 3 || ok || upTo != 7 || es != nil {
		t.Fatalf("base %d, %d kept; since 2: %v %d %v", h.base, len(h.recent), ok, upTo, es)
	}
	es, upTo, _, ok = h.since(4, store.EventFilter{Owner: "ann"})
	if !ok || upTo != 7 || len(es) != 2 || es[0].ID != 5 || es[1].ID != 7 || !strings.HasPrefix(string(es[1].frame), "id: 7\nevent: vm.state\ndata: {") {
		t.Fatalf("since 4: %v %d %+v", ok, upTo, es)
	}
}
