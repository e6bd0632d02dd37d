package bench_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/task"
)

// taskProfile is createProfile's seat with the cloud-init seed a task's
// runner comes in (tasks need a Linux profile with cloud_init).
const taskProfile = createProfile + `
template "plain" {
  content = "#cloud-config\nuser: ${user}\n"
}
profile "l40s-task" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  cloud_init { template = "plain" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
  lease {
    default = "2h"
    max     = "8h"
  }
}
`

// fakeGuest listens where a task's channel socket would be, as QEMU does
// for a channel of mode bind, and hands over each connection once it has
// read the supervisor's first line (its "from").
type fakeGuest struct {
	path  string
	conns chan net.Conn
}

func newFakeGuest(b *testing.B) *fakeGuest {
	b.Helper()
	g := &fakeGuest{path: filepath.Join(b.TempDir(), "task.sock"), conns: make(chan net.Conn, 1)}
	l, err := net.Listen("unix", g.path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				c.Close()
				continue
			}
			g.conns <- c
		}
	}()
	return g
}

// BenchmarkTaskDispatch measures what gpuvmd adds to a task's start over
// the backend and libvirt calls it makes, on BenchmarkCreate's rig
// (createRig). One iteration: POST /v1/tasks, the orchestrator run inline
// (Drain) until the task's VM is running, then one round of the task
// supervisor (pkg/task), which reads the live domain XML from libvirt for
// the channel's socket and connects to the guest's runner. libvirt's test
// driver runs no QEMU and places no socket: the XML's task channel is
// checked to be there, and the socket connected to is the benchmark's
// own, a fake guest that accepts and reads the supervisor's first line
// ("from"). The attach therefore ends at the runner's connection, not at
// a real guest's hello (which waits for its boot). The task is then
// cancelled and its VM deleted (not timed).
//
// Metrics, per task, as BenchmarkCreate's, total being submit to the
// supervisor attached; and
//
//	to-running-ms/op     submit to the task's VM running
//	attach-ms/op         VM running to the supervisor connected
//	libvirt-xml-ms/op    the supervisor's read of the live domain XML
//	                     (taken out of gpuvmd-ms/op)
func BenchmarkTaskDispatch(b *testing.B) {
	ctx := context.Background()
	r := newCreateRig(b, taskProfile)
	// The seed goes in the storage pool gpuvmd makes when it starts.
	if err := r.hv.EnsurePool(ctx, r.cfg.Server.Libvirt.StoragePool, filepath.Join(r.dir, "pool")); err != nil {
		b.Fatal(err)
	}
	guest := newFakeGuest(b)
	var xmlTime time.Duration
	sup, err := task.New(task.Config{Store: r.st, Log: quietLog(), LogDir: filepath.Join(r.dir, "tasks"), Host: "bench-host",
		Channel: func(ctx context.Context, vmID string) (string, error) {
			start := time.Now()
			x, err := r.hv.XML(ctx, vmID, false)
			xmlTime += time.Since(start)
			if err != nil {
				return "", err
			}
			if _, err := domain.TaskChannelPath(x); err != nil && !errors.Is(err, domain.ErrNoTaskChannel) || !strings.Contains(x, domain.TaskChannelName) {
				return "", fmt.Errorf("the task's domain has no task channel: %v", err)
			}
			return guest.path, nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sup.Close)

	var total, toRunning, attach time.Duration
	n := 0
	for b.Loop() {
		r.timer.measure(true)
		start := time.Now()
		var tk api.Task
		if err := r.call(http.MethodPost, "/v1/tasks", `{"profile":"l40s-task","command":["true"],"time_limit":"1h"}`, http.StatusAccepted, &tk); err != nil {
			b.Fatal(err)
		}
		r.o.Drain(ctx)
		running := time.Now()
		if err := sup.Round(ctx); err != nil {
			b.Fatal(err)
		}
		var c net.Conn
		select {
		case c = <-guest.conns:
		case <-time.After(10 * time.Second):
			b.Fatal("the supervisor did not connect to the task's channel")
		}
		end := time.Now()
		total += end.Sub(start)
		toRunning += running.Sub(start)
		attach += end.Sub(running)
		r.timer.measure(false)
		n++

		b.StopTimer()
		stopTask(b, r, sup, tk.ID, c)
		b.StartTimer()
	}
	r.report(b, total, n, xmlTime)
	b.ReportMetric(ms(toRunning)/float64(max(n, 1)), "to-running-ms/op")
	b.ReportMetric(ms(attach)/float64(max(n, 1)), "attach-ms/op")
	b.ReportMetric(ms(xmlTime)/float64(max(n, 1)), "libvirt-xml-ms/op")
}

// stopTask checks a dispatched task is booting with its VM running, cancels
// it, and runs the supervisor and the orchestrator until its VM is deleted
// and it has ended.
func stopTask(b *testing.B, r *createRig, sup *task.Supervisor, id string, c net.Conn) {
	b.Helper()
	ctx := context.Background()
	t, err := r.st.GetTask(ctx, id)
	if err != nil || t.State != api.TaskBooting {
		b.Fatalf("after dispatch: %+v, %v", t, err)
	}
	if vm, err := r.st.GetVM(ctx, t.VMID); err != nil || vm.State != store.VMRunning {
		b.Fatalf("the task's VM: %+v, %v", vm, err)
	}
	if err := r.call(http.MethodPost, "/v1/tasks/"+id+"/cancel", "", http.StatusAccepted, nil); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if err := sup.Round(ctx); err != nil {
			b.Fatal(err)
		}
		r.o.Drain(ctx)
		vm, err := r.st.GetVM(ctx, t.VMID)
		if err != nil {
			b.Fatal(err)
		}
		if t, err = r.st.GetTask(ctx, id); err != nil {
			b.Fatal(err)
		}
		if vm.State == store.VMDeleted && t.State == api.TaskCancelled {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("the cancelled task is %s (%s)", t.State, t.Reason)
}
