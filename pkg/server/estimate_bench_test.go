package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// seedQueue queues n more VMs of the whole profile for ann, in
// transactions of 500 (each CreateVM a savepoint), as POST /v1/vms would.
func seedQueue(b *testing.B, st *store.Store, n int) []string {
	b.Helper()
	ctx := context.Background()
	var ids []string
	for lo := 0; lo < n; lo += 500 {
		err := st.Tx(ctx, func(tx *store.Store) error {
			for i := lo; i < min(lo+500, n); i++ {
				vm := &store.VM{Name: fmt.Sprint("bq", i), Owner: "ann", Profile: "whole", Hours: 2, Spec: "{}"}
				if _, err := tx.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
					return err
				}
				ids = append(ids, vm.ID)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return ids
}

// benchEstimates is the estimate env (two busy GPUs) with queued more
// VMs, its first computation done.
func benchEstimates(b *testing.B, queued int) (*estimateEnv, []string) {
	e := newEstimateEnv(b, "2h")
	ids := seedQueue(b, e.st.(*store.Store), queued)
	start := time.Now()
	caughtUp(b, e.s) // the replay, as the worker runs it
	took := time.Since(start)
	b.Cleanup(func() { b.ReportMetric(float64(took.Milliseconds()), "replay-ms") })
	return e, ids
}

// BenchmarkQueuedVMGet: GET /v1/vms/{id} of a queued VM behind 1,000 and
// 3,000 others; the replay runs in the background (once, here), so the
// time per request does not grow with the queue.
func BenchmarkQueuedVMGet(b *testing.B) {
	for _, n := range []int{1000, 3000} {
		b.Run(fmt.Sprint(n, "queued"), func(b *testing.B) {
			e, ids := benchEstimates(b, n)
			path := "/v1/vms/" + ids[len(ids)-1]
			b.ResetTimer()
			for range b.N {
				rec := httptest.NewRecorder()
				e.s.ServeHTTP(rec, authed("GET", path, "ann-token"))
				if rec.Code != 200 {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// BenchmarkProfilesGet: GET /v1/profiles (the portal's catalogue) with
// 1,000 and 3,000 VMs queued.
func BenchmarkProfilesGet(b *testing.B) {
	for _, n := range []int{1000, 3000} {
		b.Run(fmt.Sprint(n, "queued"), func(b *testing.B) {
			e, _ := benchEstimates(b, n)
			httpGetTB(b, e.s, "/v1/profiles") // asks for the probes once
			caughtUp(b, e.s)
			b.ResetTimer()
			for range b.N {
				httpGetTB(b, e.s, "/v1/profiles")
			}
		})
	}
}

func authed(method, path, token string) *http.Request {
	req := httptest.NewRequest(method, path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

func httpGetTB(b testing.TB, s *Server, path string) {
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, authed("GET", path, "ann-token"))
	if rec.Code != 200 {
		b.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
}

// BenchmarkQueuePage: GET /v1/vms?state=queued&limit=1000, the admin's
// queue a page of 1,000 at a time (the portal's admin queue), with 3,000
// queued and their estimates computed.
func BenchmarkQueuePage(b *testing.B) {
	e, _ := benchEstimates(b, 3000)
	b.ResetTimer()
	for range b.N {
		rec := httptest.NewRecorder()
		e.s.ServeHTTP(rec, authed("GET", "/v1/vms?state=queued&limit=1000", "admin-token"))
		if rec.Code != 200 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}
