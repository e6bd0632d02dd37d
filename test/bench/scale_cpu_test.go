package bench_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// cpuShares is the CPU time (utime+stime, clock ticks) of the processes
// that share the machine during a phase: each node, PostgreSQL's
// processes together, and this harness.
type cpuShares struct {
	at       time.Time
	nodes    []int64
	postgres int64
	harness  int64
}

// readShares reads the CPU time of each node, of every process named
// postgres (the cluster's server, its workers and backends) and of this
// process. A process that ended between two readings is not counted.
func (r *scaleRun) readShares() cpuShares {
	s := cpuShares{at: time.Now(), nodes: make([]int64, len(r.procs))}
	for i, p := range r.procs {
		s.nodes[i], _ = cpuTicks(p.Pid())
	}
	s.harness, _ = cpuTicks(os.Getpid())
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		if t, err := cpuTicks(pid); err == nil {
			s.postgres += t
		}
	}
	return s
}

// since says, in cores, what each process took between before and s:
// "n1 0.41, n2 0.13, n3 0.13, postgres 0.45, harness 0.15 (cores, over
// 7.0 s; this machine has 2)".
func (s cpuShares) since(before cpuShares, names []string) string {
	secs := s.at.Sub(before.at).Seconds()
	cores := func(t int64) string { return fmt.Sprintf("%.2f", float64(t)/clkTck/secs) }
	var parts []string
	for i := range s.nodes {
		name := names[i]
		if name == "" {
			name = "gpuvmd"
		}
		parts = append(parts, name+" "+cores(s.nodes[i]-before.nodes[i]))
	}
	parts = append(parts, "postgres "+cores(s.postgres-before.postgres), "harness "+cores(s.harness-before.harness))
	return fmt.Sprintf("%s (cores, over %.1f s; this machine has %d)", strings.Join(parts, ", "), secs, runtime.NumCPU())
}
