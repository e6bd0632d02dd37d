package client_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

// queries records the query of every request a client sends.
type queries struct {
	mu   sync.Mutex
	seen []string
	next http.RoundTripper
}

func (q *queries) RoundTrip(r *http.Request) (*http.Response, error) {
	q.mu.Lock()
	q.seen = append(q.seen, r.URL.Query().Get("after"))
	q.mu.Unlock()
	return q.next.RoundTrip(r)
}

// GetTaskAll of an array of more elements than the server's most in a
// page follows its pages: every element once, by index, its counts kept,
// in as many requests as pages.
func TestGetTaskAllPages(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Profiles: clienttest.TaskProfiles})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ann, err := client.New(env.URL, env.UserToken)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2500 // two pages of the server's most, 1000, and a half one
	arr, err := ann.SubmitTask(ctx, api.CreateTaskRequest{Profile: "job", Command: []string{"true"}, TimeLimit: "1h", Array: "0-" + strconv.Itoa(n-1)})
	if err != nil {
		t.Fatal(err)
	}
	q := &queries{next: http.DefaultTransport}
	ann.HTTP = &http.Client{Timeout: time.Minute, Transport: q}
	all, err := ann.GetTaskAll(ctx, arr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Elements) != n || all.ElementsNext != "" || all.ArrayCounts[api.TaskPending] != n {
		t.Fatalf("%d elements, next %q, counts %v; want %d, none, all pending", len(all.Elements), all.ElementsNext, all.ArrayCounts, n)
	}
	for i, e := range all.Elements {
		if want := arr.ID + "_" + strconv.Itoa(i); e.ID != want || e.ArrayIndex == nil || *e.ArrayIndex != i {
			t.Fatalf("element %d: %s index %v, want %s", i, e.ID, e.ArrayIndex, want)
		}
	}
	if want := []string{"", "999", "1999"}; !slices.Equal(q.seen, want) {
		t.Errorf("requests after %q, want %q", q.seen, want)
	}
}
