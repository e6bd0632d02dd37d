package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

// nextEvents reads n events or fails the test.
func nextEvents(t *testing.T, es *client.EventStream, n int) []api.Event {
	t.Helper()
	var out []api.Event
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		e, err := es.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d events %+v: %v", len(out), out, err)
		}
		out = append(out, e)
	}
	return out
}

// quiet checks that no event comes for a while.
func quiet(t *testing.T, es *client.EventStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if e, err := es.Next(ctx); err == nil {
		t.Errorf("unexpected event %+v", e)
	}
}

func TestEvents(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Step: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ann, _ := client.New(env.URL, env.UserToken)
	admin, _ := client.New(env.URL, env.AdminToken)
	env.Worker.Pause()

	annAll, err := ann.Events(ctx, client.EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer annAll.Close()
	adminAll, err := admin.Events(ctx, client.EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer adminAll.Close()

	mine, err := ann.CreateVM(ctx, api.CreateVMRequest{Profile: "seat", Name: "mine"}, "")
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := admin.CreateVM(ctx, api.CreateVMRequest{Profile: "seat", Name: "theirs"}, "")
	if err != nil {
		t.Fatal(err)
	}
	// Ann sees her VM's creation and nothing of the admin's.
	got := nextEvents(t, annAll, 1)
	if got[0].Type != api.EventVMCreated || got[0].VMID != mine.VM.ID || got[0].Owner != "ann" || got[0].ID <= 0 {
		t.Errorf("ann's first event: %+v", got[0])
	}
	quiet(t, annAll)
	// The admin sees both, in order.
	got = nextEvents(t, adminAll, 2)
	if got[0].VMID != mine.VM.ID || got[1].VMID != theirs.VM.ID || got[1].ID <= got[0].ID {
		t.Errorf("admin's events: %+v", got)
	}
	firstID := got[0].ID

	// One VM's events: its state changes, with the state payload.
	one, err := ann.Events(ctx, client.EventsOptions{VM: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	env.Worker.Paused.Store(false)
	states := map[string]bool{}
	for !states["running"] {
		e := nextEvents(t, one, 1)[0]
		if e.VMID != mine.VM.ID || e.Type != api.EventVMState {
			t.Fatalf("event of another VM or type: %+v", e)
		}
		var p api.VMStatePayload
		if err := json.Unmarshal(e.Payload, &p); err != nil || p.State == "" || p.Version < 2 {
			t.Fatalf("payload %s: %v", e.Payload, err)
		}
		states[p.State] = true
	}
	if !states["allocating"] || !states["creating"] {
		t.Errorf("states seen: %v", states)
	}

	// Resuming after an ID replays what came since, filtered.
	replay, err := ann.Events(ctx, client.EventsOptions{After: firstID})
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Close()
	for _, e := range nextEvents(t, replay, 3) {
		if e.ID <= firstID || e.Owner != "ann" {
			t.Errorf("replayed %+v", e)
		}
	}

	// Bad input.
	if _, err := ann.Events(ctx, client.EventsOptions{VM: "theirs"}); !client.IsNotFound(err) {
		t.Errorf("another user's VM: %v", err)
	}
	if _, err := ann.Events(ctx, client.EventsOptions{VM: "nope"}); !client.IsNotFound(err) {
		t.Errorf("unknown VM: %v", err)
	}
	nobody, _ := client.New(env.URL, "bad")
	if _, err := nobody.Events(ctx, client.EventsOptions{}); !client.IsUnauthenticated(err) {
		t.Errorf("bad token: %v", err)
	}
}

// WaitVM follows the events: with a poll interval far longer than the
// test's deadline, only the stream can tell it the VM is running.
func TestWaitVMFollowsEvents(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Step: 20 * time.Millisecond})
	ann, _ := client.New(env.URL, env.UserToken)
	ann.PollMin, ann.PollMax = time.Hour, time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	created, err := ann.CreateVM(ctx, api.CreateVMRequest{Profile: "seat", Name: "w"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	vm, err := ann.WaitVM(ctx, created.VM.ID, func(v api.VM) { seen = append(seen, v.State) })
	if err != nil || vm.State != "running" {
		t.Fatalf("%v %+v (seen %v)", err, vm, seen)
	}
	if len(seen) < 2 {
		t.Errorf("states seen: %v", seen)
	}
}

// A stream that breaks is reopened after the last event delivered, and the
// parser takes what the format allows: CRLF, comments, data in two lines.
func TestEventStreamResumes(t *testing.T) {
	var conns atomic.Int32
	var lastIDs []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := conns.Add(1)
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Query().Get("vm") != "v1" {
			w.WriteHeader(400)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		switch n {
		case 1:
			io.WriteString(w, ": hello\r\nretry: 10\r\n\r\nid: 7\r\nevent: vm.state\r\ndata: {\"id\":7,\r\ndata: \"type\":\"vm.state\",\"vm_id\":\"v1\"}\r\n\r\n")
		case 2:
			io.WriteString(w, "id: 8\nevent: vm.state\ndata: {\"id\":8,\"type\":\"vm.state\",\"vm_id\":\"v1\"}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL, "tok")
	c.PollMin = time.Millisecond
	es, err := c.Events(context.Background(), client.EventsOptions{VM: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	got := nextEvents(t, es, 2)
	es.Close()
	if got[0].ID != 7 || got[1].ID != 8 || got[0].VMID != "v1" {
		t.Errorf("events %+v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lastIDs) != 2 || lastIDs[0] != "" || lastIDs[1] != "7" {
		t.Errorf("Last-Event-ID sent: %q", lastIDs)
	}
	// After Close, Next says the stream ended.
	if _, err := es.Next(context.Background()); err == nil {
		t.Error("Next after Close gave no error")
	}
}

// A stream that cannot be reopened ends with the reason.
func TestEventStreamGivesUp(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conns.Add(1) == 1 {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, ": open\n\n")
			return // the stream breaks at once
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(401)
		io.WriteString(w, `{"type":"https://gpuvm.dev/problems/unauthenticated","title":"Authentication required","status":401}`)
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL, "tok")
	c.PollMin = time.Millisecond
	es, err := c.Events(context.Background(), client.EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := es.Next(ctx); !client.IsUnauthenticated(err) {
		t.Errorf("ended with %v, want the 401 of the reopening", err)
	}
}
