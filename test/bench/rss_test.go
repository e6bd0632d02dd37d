package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/test/testbin"
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
	bin := b.TempDir()
	if err := testbin.Build(bin, "gpuvmd", "./cmd/gpuvmd"); err != nil {
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
		r := runGpuvmd(b, filepath.Join(bin, "gpuvmd"), state, pluginDir, idle)
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

var readyLine = regexp.MustCompile(`gpuvmd ready.* listen=(\S+)`)

func runGpuvmd(b *testing.B, gpuvmd, state, pluginDir string, idle time.Duration) rssReading {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gpuvmd, "--state-dir", state, "--listen", "127.0.0.1:0",
		"--libvirt-uri", "test:///default", "--simulate", "l40sx4", "--plugin-dir", pluginDir)
	cmd.Env = append(os.Environ(), "GPUVM_CONFIG=")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var logs strings.Builder
	ready := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			logs.WriteString(line + "\n")
			if m := readyLine.FindStringSubmatch(line); m != nil {
				select {
				case ready <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		<-copied
		if err != nil {
			b.Logf("gpuvmd exited: %v", err)
		}
	}
	select {
	case addr := <-ready:
		b.Logf("gpuvmd ready on %s; idling %v", addr, idle)
	case <-time.After(time.Minute):
		stop()
		b.Fatalf("gpuvmd not ready within a minute\n%s", logs.String())
	}
	time.Sleep(idle)
	pid := cmd.Process.Pid
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
	if strings.Contains(logs.String(), "level=ERROR") {
		b.Logf("gpuvmd logged errors:\n%s", logs.String())
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
