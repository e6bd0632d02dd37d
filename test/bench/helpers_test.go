// Package bench_test holds gpuvm's performance benchmarks (issue #5). They
// only report figures (b.ReportMetric), never assert times, and hold no
// Test functions: a plain `go test ./...` compiles them and runs nothing.
// See README.md for how to run them.
package bench_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/server"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
	"github.com/gpuvm/gpuvm/test/internal/daemon"
)

// Built binaries are made on first use only (a `go test ./...` that runs no
// benchmark builds nothing) and removed when the test binary ends.
func TestMain(m *testing.M) {
	code := m.Run()
	daemon.Cleanup()
	os.Exit(code)
}

// plugins returns a directory holding the backend binaries ($GPUVM_PLUGIN_DIR,
// else built once per run).
func plugins(b *testing.B) string {
	b.Helper()
	dir, err := daemon.Plugins()
	if err != nil {
		b.Fatal(err)
	}
	return dir
}

// quietLog drops everything below error: the benchmarks measure gpuvmd, not
// its logging of every statement.
func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
}

// openStore opens (and migrates) a SQLite database at path.
func openStore(b *testing.B, path string) *store.Store {
	b.Helper()
	return storetest.Open(b, store.Config{DSN: path, Logger: quietLog()})
}

// adminToken makes the admin user and its token, as gpuvmd does on first
// start, and returns the token.
func adminToken(b *testing.B, st *store.Store, dir string) string {
	b.Helper()
	path, _, err := server.EnsureAdmin(context.Background(), st, dir)
	if err != nil {
		b.Fatal(err)
	}
	tok, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return strings.TrimSpace(string(tok))
}

// seedOwners is how many users the seeded VMs belong to.
const seedOwners = 10

// seedVMs records n VMs through the store's own methods, as gpuvmd would
// have: CreateVM (VM, create operation, event), the operation finished, and
// for every running VM a passthrough allocation of its own GPU on host (so
// that listing loads real allocation rows). States: a tenth deleted, a fifth
// queued, the rest running. The writes go in transactions of 500 VMs (each
// method runs as a savepoint), which keeps 10,000 VMs to a few seconds.
func seedVMs(b *testing.B, st *store.Store, n int, host string) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	for i := range seedOwners {
		name := fmt.Sprint("user", i)
		if _, err := st.GetUser(ctx, name); err == nil {
			continue
		}
		if err := st.CreateUser(ctx, &store.User{Name: name}); err != nil {
			b.Fatal(err)
		}
	}
	const batch = 500
	for lo := 0; lo < n; lo += batch {
		err := st.Tx(ctx, func(tx *store.Store) error {
			for i := lo; i < min(lo+batch, n); i++ {
				state := store.VMRunning
				switch i % 10 {
				case 0:
					state = store.VMDeleted
				case 1, 2:
					state = store.VMQueued
				}
				vm := &store.VM{Name: fmt.Sprint("vm", i), Owner: fmt.Sprint("user", i%seedOwners), Profile: "l40s-seat",
					Spec: `{"hours":8}`, State: state, Hours: 8}
				if state == store.VMRunning {
					vm.Host = host
				}
				op, err := tx.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: vm.Owner})
				if err != nil {
					return err
				}
				if err := tx.FinishOperation(ctx, op.ID, nil); err != nil {
					return err
				}
				if state != store.VMRunning {
					continue
				}
				addr := fmt.Sprintf("0000:%02x:%02x.%d", i/(32*8)%256, i/8%32, i%8)
				if _, err := tx.ClaimAllocation(ctx, vm.ID, []store.SlotClaim{{
					Host: host, GPUAddress: addr, Backend: "passthrough", Kind: gpu.KindPassthrough, Profile: "L40S",
				}}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatalf("seed VMs %d..: %v", lo, err)
		}
	}
	b.Logf("seeded %d VMs in %v", n, time.Since(start).Round(time.Millisecond))
}

// envInts reads a comma-separated list of positive integers from the
// environment, or def.
func envInts(b testing.TB, name string, def ...int) []int {
	b.Helper()
	return envIntsFrom(b, name, 1, def)
}

// envCount is envInts's first number, which may be 0 (none), def when unset.
func envCount(b testing.TB, name string, def int) int {
	b.Helper()
	return envIntsFrom(b, name, 0, []int{def})[0]
}

func envIntsFrom(b testing.TB, name string, least int, def []int) []int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < least {
			b.Fatalf("$%s: %q is not a list of integers of at least %d", name, v, least)
		}
		out = append(out, n)
	}
	return out
}

func envDuration(b testing.TB, name string, def time.Duration) time.Duration {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		b.Fatalf("$%s: %v", name, err)
	}
	return d
}

// percentile of sorted durations, in milliseconds (nearest rank).
func percentileMS(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Millisecond)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
