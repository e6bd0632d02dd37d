package webhook

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/clocktest"
)

// notified records MarkAlertNotified.
type notified struct {
	mu  sync.Mutex
	ids map[int64]time.Time
}

func (n *notified) MarkAlertNotified(_ context.Context, id int64, at time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ids[id] = at
	return nil
}

// TestDelivery: a receiver that fails with the given statuses first, then
// answers 204; a retried status is retried until it succeeds, another is
// given up at once; only a delivered alert is recorded.
func TestDelivery(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name          string
		fail          []int
		wantPosts     int
		wantDelivered bool
	}{
		{"at once", nil, 1, true},
		{"5xx and 429 retried", []int{503, 429, 500}, 4, true},
		{"400 not retried", []int{400}, 1, false},
		{"gives up after Attempts", []int{500, 500, 500, 500, 500, 500}, Attempts, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			posts := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var note api.AlertNotification
				if err := json.NewDecoder(r.Body).Decode(&note); err != nil || note.Rule != "hot" {
					t.Errorf("body: %+v, %v", note, err)
				}
				mu.Lock()
				defer mu.Unlock()
				posts++
				if posts <= len(tc.fail) {
					w.WriteHeader(tc.fail[posts-1])
					return
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			defer srv.Close()
			st := &notified{ids: map[int64]time.Time{}}
			n := New(srv.Client(), st, clocktest.New(at), slog.New(slog.DiscardHandler))
			n.SetBackoff(func(int) time.Duration { return time.Millisecond })
			n.Notify(srv.URL, api.AlertNotification{AlertID: 7, Rule: "hot", Subject: "gpu01/0000:01:00.0"})
			n.Wait()
			n.Close()
			mu.Lock()
			defer mu.Unlock()
			if posts != tc.wantPosts {
				t.Errorf("%d POSTs, want %d", posts, tc.wantPosts)
			}
			if got, ok := st.ids[7]; ok != tc.wantDelivered || (ok && !got.Equal(at)) {
				t.Errorf("recorded %v (%v), want delivered %v at %v", got, ok, tc.wantDelivered, at)
			}
		})
	}
}
