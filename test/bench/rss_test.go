package bench_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/test/internal/daemon"
)

// BenchmarkIdleRSS measures the resident memory of gpuvmd idle with 1,000
// VMs recorded (target < 80 MB). It builds gpuvmd, seeds a SQLite database in
// a fresh state directory with 1,000 VMs (on another host, their operations
// finished, so that gpuvmd has nothing to do), starts gpuvmd as a process
// on a simulated l40sx4 host with libvirt's test driver, waits for "gpuvmd
// ready", lets it idle $GPUVM_BENCH_IDLE (default 3s), reads VmRSS from
// /proc, and stops it with SIGTERM.
//
// Metrics: rss-MB (gpuvmd), hwm-MB (gpuvmd's peak, VmHWM), plugins-rss-MB
// (the backend plugin processes, its children, together) and plugins.
func BenchmarkIdleRSS(b *testing.B) {
	gpuvmd, err := daemon.Gpuvmd()
	if err != nil {
		b.Fatal(err)
	}
	pluginDir := plugins(b)
	idle := envDuration(b, "GPUVM_BENCH_IDLE", 3*time.Second)
	var rss, hwm, prss float64
	var nplug int
	n := 0
	for b.Loop() {
		state := b.TempDir()
		st := openStore(b, filepath.Join(state, "gpuvm.db"))
		seedVMs(b, st, 1000, "elsewhere")
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
		r := runGpuvmd(b, gpuvmd, state, pluginDir, idle)
		rss += r.rss
		hwm += r.hwm
		prss += r.plugins
		nplug = r.nplugins
		n++
	}
	b.ReportMetric(rss/float64(n), "rss-MB")
	b.ReportMetric(hwm/float64(n), "hwm-MB")
	b.ReportMetric(prss/float64(n), "plugins-rss-MB")
	b.ReportMetric(float64(nplug), "plugins")
	b.ReportMetric(0, "ns/op")
}

type rssReading struct {
	rss, hwm, plugins float64 // MB (2^20 bytes)
	nplugins          int
}

func runGpuvmd(b *testing.B, gpuvmd, state, pluginDir string, idle time.Duration) rssReading {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := daemon.Start(ctx, daemon.Config{Binary: gpuvmd, ReadyTimeout: time.Minute,
		Args: []string{"--state-dir", state, "--libvirt-uri", "test:///default", "--simulate", "l40sx4", "--plugin-dir", pluginDir}})
	if err != nil {
		b.Fatal(err)
	}
	stop := func() {
		if err := p.Stop(15 * time.Second); err != nil {
			b.Logf("gpuvmd exited: %v", err)
		}
	}
	b.Logf("gpuvmd ready on %s; idling %v", p.Addr(), idle)
	time.Sleep(idle)
	pid := p.Pid()
	var r rssReading
	st, err := procStatus(pid)
	if err != nil {
		stop()
		b.Fatal(err)
	}
	r.rss, r.hwm = st["VmRSS"], st["VmHWM"]
	for _, c := range children(pid) {
		if cs, err := procStatus(c); err == nil {
			r.plugins += cs["VmRSS"]
			r.nplugins++
		}
	}
	stop()
	if logs := p.Logs(); strings.Contains(logs, "level=ERROR") {
		b.Logf("gpuvmd logged errors:\n%s", logs)
	}
	return r
}

// procStatus reads the kB fields of /proc/PID/status, in MB.
func procStatus(pid int) (map[string]float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		f := strings.Fields(v)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		if n, err := strconv.ParseFloat(f[0], 64); err == nil {
			out[k] = n / 1024
		}
	}
	return out, nil
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok {
				if p, _ := strconv.Atoi(strings.TrimSpace(v)); p == pid {
					out = append(out, c)
				}
				break
			}
		}
	}
	return out
}
