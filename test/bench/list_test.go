package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/server"
)

// noBackends is a server.Backends with none: listing VMs never asks one.
type noBackends struct{}

func (noBackends) Names() []string                        { return nil }
func (noBackends) Backend(string) (backend.Backend, bool) { return nil, false }

// listVMCount is how many VMs BenchmarkListVMs records.
const listVMCount = 10_000

// BenchmarkListVMs: requests per second and latency of GET /v1/vms (a page
// of 50, admin token) with 10,000 VMs in SQLite, through the real handler
// stack (server.New on the real store) behind httptest.NewServer. Each
// iteration sends $GPUVM_BENCH_REQUESTS requests (default 1000) from each
// number of concurrent clients in $GPUVM_BENCH_CLIENTS (default 1,8), and
// reports req/s, p50-ms and p99-ms over all of them.
//
// Pages: the first page; the first page of running VMs (?state=running);
// and a page from the middle, with the cursor of page 100.
func BenchmarkListVMs(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	st := openStore(b, filepath.Join(dir, "gpuvm.db"))
	b.Cleanup(func() { st.Close() })
	token := adminToken(b, st, dir)
	seedVMs(b, st, listVMCount, "gpu01")

	srv := httptest.NewServer(server.New(server.Deps{Auth: st, Backends: noBackends{}, Store: st, Log: quietLog()}))
	b.Cleanup(srv.Close)

	// The cursor of the page after page 100 (VMs 5,001..), found the way
	// a client walks the list.
	client := &http.Client{}
	mid, path := "", "/v1/vms?limit=50"
	for range 100 {
		var page api.VMList
		if err := getJSON(client, srv.URL+path, token, &page); err != nil {
			b.Fatal(err)
		}
		if page.Next == "" {
			b.Fatal("the list ended before page 100")
		}
		mid, path = page.Next, "/v1/vms?limit=50&after="+url.QueryEscape(page.Next)
	}
	_ = ctx

	requests := envInts(b, "GPUVM_BENCH_REQUESTS", 1000)[0]
	pages := []struct{ name, path string }{
		{"first-page", "/v1/vms?limit=50"},
		{"state-running", "/v1/vms?limit=50&state=running"},
		{"middle-page", "/v1/vms?limit=50&after=" + url.QueryEscape(mid)},
		// The portal's and the admin's longest page.
		{"page-of-1000", "/v1/vms?limit=1000"},
	}
	for _, p := range pages {
		// Check the page once: 50 VMs, running ones with their GPU.
		var page api.VMList
		if err := getJSON(client, srv.URL+p.path, token, &page); err != nil {
			b.Fatal(err)
		}
		if want := pageSize(p.path); len(page.Items) != want {
			b.Fatalf("%s: %d VMs, want %d", p.name, len(page.Items), want)
		}
		for _, vm := range page.Items {
			if vm.State == "running" && len(vm.GPUs) != 1 {
				b.Fatalf("%s: running VM %s with %d GPUs", p.name, vm.Name, len(vm.GPUs))
			}
		}
		for _, clients := range envInts(b, "GPUVM_BENCH_CLIENTS", 1, 8) {
			b.Run(fmt.Sprintf("%s/clients=%d", p.name, clients), func(b *testing.B) {
				driveGET(b, srv.URL+p.path, token, clients, requests)
			})
		}
	}
}

// pageSize is the limit a page's path asks for.
func pageSize(path string) int {
	u, err := url.Parse(path)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(u.Query().Get("limit"))
	if err != nil {
		return -1
	}
	return n
}

// driveGET sends requests GETs per iteration from clients goroutines, and
// reports throughput and latency percentiles over every iteration.
func driveGET(b *testing.B, u, token string, clients, requests int) {
	tr := &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients}
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	var lat []time.Duration
	var elapsed time.Duration
	var bytes atomic.Int64
	for b.Loop() {
		var next atomic.Int64
		per := make([][]time.Duration, clients)
		errs := make(chan error, clients)
		var wg sync.WaitGroup
		start := time.Now()
		for c := range clients {
			wg.Go(func() {
				for next.Add(1) <= int64(requests) {
					t0 := time.Now()
					n, err := get(client, u, token)
					if err != nil {
						errs <- err
						return
					}
					per[c] = append(per[c], time.Since(t0))
					bytes.Add(n)
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		for _, l := range per {
			lat = append(lat, l...)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
	b.ReportMetric(percentileMS(lat, 50), "p50-ms")
	b.ReportMetric(percentileMS(lat, 99), "p99-ms")
	b.ReportMetric(float64(bytes.Load())/float64(len(lat)), "B/resp")
	b.ReportMetric(0, "ns/op") // an iteration is a batch of requests; req/s says it
}

func get(client *http.Client, u, token string) (int64, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return n, err
	}
	if resp.StatusCode != http.StatusOK {
		return n, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return n, nil
}

func getJSON(client *http.Client, u, token string, v any) error {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, body)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
