package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// countingEvents counts the event queries the server makes. With
// pollOnly, it does not pass on the store's OnEventCommitted: the server
// sees the events by polling, as it sees another gpuvmd's.
type countingEvents struct {
	Store
	st       *store.Store
	pollOnly bool
	queries  atomic.Int64
}

func (c *countingEvents) OnEventCommitted(fn func()) func() {
	if c.pollOnly {
		return func() {}
	}
	return c.st.OnEventCommitted(fn)
}

func (c *countingEvents) ListEventsSince(ctx context.Context, after int64, f store.EventFilter) ([]store.Event, error) {
	c.queries.Add(1)
	return c.Store.ListEventsSince(ctx, after, f)
}

func (c *countingEvents) LastEventID(ctx context.Context) (int64, error) {
	c.queries.Add(1)
	return c.Store.LastEventID(ctx)
}

// fanoutCase: streams open event streams; with admins, every stream is an
// admin's and sees every event; without, the streams are the tabs of
// owners people (streams/owners each), and an event of a VM reaches only
// its owner's tabs. pollOnly: the events are another gpuvmd's (seen by
// polling the database).
type fanoutCase struct {
	streams, owners  int
	admins, pollOnly bool
}

// BenchmarkEventFanout: open GET /v1/events streams (the portal's tabs)
// behind a real HTTP server; each iteration is one VM state change written
// through the store, as the orchestrator writes it, at a random moment,
// waited for until every stream that may see it has it. Run it with
// -benchtime=100x: each iteration takes up to the poll interval.
//
// Metrics: all-p50/p99-ms, the time until the last stream has an event;
// stream-p50/p99-ms, until one stream has it; cpu-ms/event, the process's
// CPU (server and the in-process clients) per event, less the idle rate;
// db-queries/event likewise; idle-cpu-%, a core's share with the streams
// open and nothing happening (5 s); idle-queries/s; heap-KiB/stream and
// goroutines/stream, server and client side together.
func BenchmarkEventFanout(b *testing.B) {
	for _, c := range []fanoutCase{{100, 10, false, false}, {1000, 100, false, false}, {100, 10, true, false}, {1000, 10, true, false}, {1000, 10, true, true}} {
		who := fmt.Sprint(c.owners, "owners")
		if c.admins {
			who = "admins"
		}
		if c.pollOnly {
			who += "/poll-only"
		}
		b.Run(fmt.Sprint(c.streams, "streams/", who), func(b *testing.B) { benchFanout(b, c) })
	}
}

// fanoutEnv is the server, its owners' VMs and the open streams.
type fanoutEnv struct {
	st     *store.Store
	count  *countingEvents
	vms    []*store.VM
	owner  []int // the owner index of each stream; -1: an admin
	base   int64 // the last event ID before the first iteration
	sent   []time.Time
	recv   [][]time.Time // [event][stream]
	got    []atomic.Int32
	want   []int32
	done   []chan struct{}
	wrong  atomic.Int64 // events a stream must not see, or not expected
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func benchFanout(b *testing.B, c fanoutCase) {
	e := newFanoutEnv(b, c)
	srv := httptest.NewServer(newServer(b, Deps{Auth: fanoutAuth(c), Backends: fakeBackends{}, Config: &fakeConfig{cfg: estimateConfig(b, "8h")}, Store: e.count}))
	defer srv.Close()
	defer e.wg.Wait()
	defer func() { e.cancel() }()

	var ms0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	g0 := runtime.NumGoroutine()
	e.open(b, srv.URL, c)
	time.Sleep(500 * time.Millisecond)
	var ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	g1 := runtime.NumGoroutine()

	idle := 5 * time.Second
	q0, cpu0 := e.count.queries.Load(), cpuTime()
	time.Sleep(idle)
	idleCPU := cpuTime() - cpu0
	idleQ := e.count.queries.Load() - q0

	ctx := context.Background()
	b.ResetTimer()
	start, q1, cpu1 := time.Now(), e.count.queries.Load(), cpuTime()
	for i := range b.N {
		time.Sleep(rand.N(250 * time.Millisecond))
		vm := e.vms[i%len(e.vms)]
		e.sent[i] = time.Now()
		up, err := e.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: fmt.Sprint("step-", i)})
		if err != nil {
			b.Fatal(err)
		}
		e.vms[i%len(e.vms)] = up
		select {
		case <-e.done[i]:
		case <-time.After(10 * time.Second):
			b.Fatalf("event %d reached %d of %d streams in 10 s", i, e.got[i].Load(), e.want[i])
		}
	}
	wall, cpu, q := time.Since(start), cpuTime()-cpu1, e.count.queries.Load()-q1
	b.StopTimer()
	time.Sleep(300 * time.Millisecond) // an event that should not come has had its chance
	if n := e.wrong.Load(); n != 0 {
		b.Fatalf("%d events reached streams that must not see them", n)
	}

	all, one := e.latencies(b.N)
	rate := float64(idleCPU) / float64(idle)
	b.ReportMetric(pct(all, 50), "all-p50-ms")
	b.ReportMetric(pct(all, 99), "all-p99-ms")
	b.ReportMetric(pct(one, 50), "stream-p50-ms")
	b.ReportMetric(pct(one, 99), "stream-p99-ms")
	b.ReportMetric((float64(cpu)-rate*float64(wall))/float64(b.N)/1e6, "cpu-ms/event")
	b.ReportMetric((float64(q)-float64(idleQ)*wall.Seconds()/idle.Seconds())/float64(b.N), "db-queries/event")
	b.ReportMetric(rate*100, "idle-cpu-%")
	b.ReportMetric(float64(idleQ)/idle.Seconds(), "idle-queries/s")
	b.ReportMetric(float64(int64(ms1.HeapInuse)-int64(ms0.HeapInuse))/1024/float64(c.streams), "heap-KiB/stream")
	b.ReportMetric(float64(g1-g0)/float64(c.streams), "goroutines/stream")
	b.ReportMetric(0, "ns/op")
}

// fanoutAuth: tokens own-N (the owners) and admin-N.
func fanoutAuth(c fanoutCase) fakeAuth {
	a := fakeAuth{}
	for i := range c.owners {
		a[fmt.Sprint("own-", i)] = &store.User{Name: fmt.Sprint("own", i)}
	}
	for i := range 10 {
		a[fmt.Sprint("admin-", i)] = &store.User{Name: fmt.Sprint("admin", i), Admin: true}
	}
	return a
}

// newFanoutEnv makes the store: the owners, a VM each, and room for b.N
// events.
func newFanoutEnv(b *testing.B, c fanoutCase) *fanoutEnv {
	ctx := context.Background()
	e := &fanoutEnv{st: storetest.New(b, storetest.Quiet)}
	e.count = &countingEvents{Store: e.st, st: e.st, pollOnly: c.pollOnly}
	for i := range c.owners {
		name := fmt.Sprint("own", i)
		if err := e.st.CreateUser(ctx, &store.User{Name: name}); err != nil {
			b.Fatal(err)
		}
		vm := &store.VM{Name: "w", Owner: name, Profile: "seat", Hours: 2, Spec: "{}"}
		if _, err := e.st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: name}); err != nil {
			b.Fatal(err)
		}
		e.vms = append(e.vms, vm)
	}
	var err error
	if e.base, err = e.st.LastEventID(ctx); err != nil {
		b.Fatal(err)
	}
	for k := range c.streams {
		o := k % c.owners
		if c.admins {
			o = -1
		}
		e.owner = append(e.owner, o)
	}
	e.sent, e.recv, e.got = make([]time.Time, b.N), make([][]time.Time, b.N), make([]atomic.Int32, b.N)
	e.want, e.done = make([]int32, b.N), make([]chan struct{}, b.N)
	for i := range b.N {
		e.recv[i] = make([]time.Time, c.streams)
		e.done[i] = make(chan struct{})
		for _, o := range e.owner {
			if o < 0 || o == i%c.owners {
				e.want[i]++
			}
		}
	}
	return e
}

// open opens the streams, 50 at a time, each read by a goroutine.
func (e *fanoutEnv) open(b *testing.B, url string, c fanoutCase) {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, DisableCompression: true}}
	sem := make(chan struct{}, 50)
	errs := make(chan error, c.streams)
	var opened sync.WaitGroup
	for k := range c.streams {
		token := fmt.Sprint("admin-", k%10)
		if e.owner[k] >= 0 {
			token = fmt.Sprint("own-", e.owner[k])
		}
		sem <- struct{}{}
		opened.Add(1)
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			r, err := openStream(ctx, client, url, token)
			<-sem
			opened.Done()
			if err != nil {
				errs <- err
				return
			}
			e.read(k, r)
		}()
	}
	opened.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func openStream(ctx context.Context, client *http.Client, url, token string) (*bufio.Reader, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/v1/events", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return nil, fmt.Errorf("GET /v1/events: %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	if l, err := r.ReadString('\n'); err != nil || !bytes.HasPrefix([]byte(l), []byte(": gpuvm events after")) {
		resp.Body.Close()
		return nil, fmt.Errorf("first line %q: %v", l, err)
	}
	go func() { <-ctx.Done(); resp.Body.Close() }()
	return r, nil
}

// read notes when stream k has each event, until the stream ends.
func (e *fanoutEnv) read(k int, r *bufio.Reader) {
	for {
		l, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		if !bytes.HasPrefix(l, []byte("id: ")) {
			continue
		}
		now := time.Now()
		id, err := strconv.ParseInt(string(bytes.TrimSpace(l[4:])), 10, 64)
		i := int(id - e.base - 1)
		if err != nil || i < 0 || i >= len(e.recv) || (e.owner[k] >= 0 && e.owner[k] != i%len(e.vms)) || !e.recv[i][k].IsZero() {
			e.wrong.Add(1)
			continue
		}
		e.recv[i][k] = now
		if e.got[i].Add(1) == e.want[i] {
			close(e.done[i])
		}
	}
}

// latencies: for each event until its last stream had it, and for each
// stream that had it, in milliseconds.
func (e *fanoutEnv) latencies(n int) (all, one []float64) {
	for i := range n {
		last := 0.0
		for _, t := range e.recv[i] {
			if t.IsZero() {
				continue
			}
			d := float64(t.Sub(e.sent[i])) / 1e6
			one = append(one, d)
			last = max(last, d)
		}
		all = append(all, last)
	}
	return all, one
}

// pct is the p-th percentile of xs (nearest rank).
func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// cpuTime is the CPU the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
