package loader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/logtest"

	"github.com/gpuvm/gpuvm/pkg/backend"
)

// harness is a plugin dir of wrapper scripts around the test binary, and the
// state dir where the fake plugins leave their pid files.
type harness struct {
	dir, state string
	logs       logtest.Buffer
}

func newHarness(t *testing.T) *harness {
	return &harness{dir: t.TempDir(), state: t.TempDir()}
}

// install puts a plugin binary for name into the plugin dir, behaving as mode
// (see fakeBackend).
func (h *harness) install(t *testing.T, name, mode string, perm os.FileMode) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// atexit_sleep_ms: a -race binary otherwise sleeps 1s before exiting.
	script := fmt.Sprintf("#!/bin/sh\nGORACE=\"${GORACE:+$GORACE }atexit_sleep_ms=0\" %s=%s %s=%s %s='%s' exec '%s' \"$@\"\n",
		envName, name, envMode, mode, envState, h.state, exe)
	if err := os.WriteFile(filepath.Join(h.dir, backend.BinaryPrefix+name), []byte(script), perm); err != nil {
		t.Fatal(err)
	}
}

// start starts a Loader on the harness' plugin dir, to be closed at the end
// of the test, after which no plugin process may be left.
func (h *harness) start(t *testing.T, cfg Config, opts ...func(*Loader)) (*Loader, error) {
	t.Helper()
	cfg.Dir = h.dir
	cfg.Logger = slog.New(slog.NewJSONHandler(&h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Backend == (backend.Config{}) {
		cfg.Backend = backend.Config{SysFSRoot: "/test/sys", StateDir: "/test/state", NVML: backend.NVMLNone}
	}
	l := New(cfg)
	for _, o := range opts {
		o(l)
	}
	t.Cleanup(func() {
		l.Close()
		for _, pid := range h.pids("") {
			if alive(pid) {
				t.Errorf("plugin process %d still running after Close", pid)
			}
		}
		if t.Failed() {
			t.Logf("logs:\n%s", h.logs.String())
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	return l, l.Start(ctx)
}

// pids lists the processes that served as backend name ("": any), in the
// order they started.
func (h *harness) pids(name string) []int {
	entries, _ := os.ReadDir(h.state) // sorted by name, not start
	type started struct {
		pid int
		at  time.Time
	}
	var all []started
	for _, e := range entries {
		var pid int
		n, ok := strings.CutPrefix(e.Name(), name+".")
		if name == "" {
			_, n, ok = strings.Cut(e.Name(), ".")
			ok = ok && !strings.HasPrefix(e.Name(), "create.")
		}
		if _, err := fmt.Sscan(n, &pid); ok && err == nil {
			fi, _ := e.Info()
			all = append(all, started{pid, fi.ModTime()})
		}
	}
	slices.SortStableFunc(all, func(a, b started) int { return a.at.Compare(b.at) })
	var pids []int
	for _, s := range all {
		pids = append(pids, s.pid)
	}
	return pids
}

// records returns the logged records with message msg.
func (h *harness) records(msg string) []map[string]any {
	var recs []map[string]any
	for line := range strings.Lines(h.logs.String()) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			recs = append(recs, m)
		}
	}
	return recs
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// eventually polls f until it returns true or the time is up.
func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !f(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
	}
}

type bin struct {
	name, mode string
	perm       os.FileMode
}

func TestStartDiscovery(t *testing.T) {
	all := []bin{{"vgpu", "normal", 0o755}, {"mig", "normal", 0o755}, {"passthrough", "normal", 0o755}}
	tests := []struct {
		name       string
		plugins    []bin
		enabled    []string
		wantNames  []string
		wantWarned []string // names of backends with a warning
	}{
		{
			name:      "every shipped backend by default, not others",
			plugins:   append(slices.Clone(all), bin{"extra", "normal", 0o755}),
			wantNames: []string{"mig", "passthrough", "vgpu"},
		},
		{
			name:      "only enabled backends",
			plugins:   all,
			enabled:   []string{"vgpu", "passthrough"},
			wantNames: []string{"passthrough", "vgpu"},
		},
		{
			name:      "a backend outside backend.Names when enabled",
			plugins:   append(slices.Clone(all), bin{"extra", "normal", 0o755}),
			enabled:   []string{"extra"},
			wantNames: []string{"extra"},
		},
		{
			name:       "missing enabled binary is warned about",
			plugins:    all[:1],
			enabled:    []string{"vgpu", "mig"},
			wantNames:  []string{"vgpu"},
			wantWarned: []string{"mig"},
		},
		{
			name:       "non-executable file is skipped",
			plugins:    []bin{{"vgpu", "normal", 0o755}, {"mig", "normal", 0o644}},
			wantNames:  []string{"vgpu"},
			wantWarned: []string{"mig", "passthrough"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			for _, p := range tc.plugins {
				h.install(t, p.name, p.mode, p.perm)
			}
			if err := os.WriteFile(filepath.Join(h.dir, "README"), nil, 0o755); err != nil {
				t.Fatal(err)
			}
			l, err := h.start(t, Config{Enabled: tc.enabled})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if got := l.Names(); !reflect.DeepEqual(got, tc.wantNames) {
				t.Errorf("Names() = %v, want %v", got, tc.wantNames)
			}
			var started []string
			for _, p := range tc.plugins {
				if len(h.pids(p.name)) > 0 {
					started = append(started, p.name)
				}
			}
			slices.Sort(started)
			if !reflect.DeepEqual(started, tc.wantNames) {
				t.Errorf("started processes for %v, want %v", started, tc.wantNames)
			}
			var warned []string
			for _, r := range h.records("enabled backend has no binary in plugin dir") {
				warned = append(warned, r["backend"].(string))
			}
			for _, r := range h.records("skipping file in plugin dir that is not an executable") {
				warned = append(warned, strings.TrimPrefix(filepath.Base(r["file"].(string)), backend.BinaryPrefix))
			}
			slices.Sort(warned)
			if !slices.Equal(warned, tc.wantWarned) {
				t.Errorf("warned about %v, want %v", warned, tc.wantWarned)
			}
		})
	}
}

func TestStartConfigures(t *testing.T) {
	h := newHarness(t)
	h.install(t, "vgpu", "normal", 0o755)
	l, err := h.start(t, Config{Backend: backend.Config{APIVersion: "v42", SysFSRoot: "/captured/sys"}})
	if err != nil {
		t.Fatal(err)
	}
	b, ok := l.Backend("vgpu")
	if !ok {
		t.Fatal("Backend(vgpu) not found")
	}
	inv, err := b.Inventory(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if inv.Host != "/captured/sys" || inv.Notes[0] != "api v1" {
		t.Errorf("backend was configured with host %q and %q, want /captured/sys and api v1", inv.Host, inv.Notes[0])
	}
	if _, ok := l.Backend("mig"); ok {
		t.Error("Backend(mig) found, but it was never started")
	}
	// The plugin's slog line came through go-plugin at its own level.
	eventually(t, 5*time.Second, "plugin's log line not relayed", func() bool {
		for _, r := range h.records("fake backend configured") {
			if r["level"] == "WARN" && r["api_version"] == "v1" && r["plugin"] == backend.BinaryPrefix+"vgpu" && r["backend"] == "vgpu" {
				return true
			}
		}
		return false
	})
	// So did what it wrote to os.Stderr.
	eventually(t, 5*time.Second, "plugin's stderr not relayed", func() bool {
		recs := h.records("fake backend wrote to stderr")
		return len(recs) > 0 && recs[0]["level"] == "ERROR" && recs[0]["backend"] == "vgpu"
	})
}

func TestStartFailures(t *testing.T) {
	tests := []struct {
		name      string
		plugins   []bin
		wantNames []string
		wantErrs  map[string]string // backend: in its failure
	}{
		{
			name:      "name mismatch",
			plugins:   []bin{{"vgpu", "wrong-name", 0o755}, {"mig", "normal", 0o755}},
			wantNames: []string{"mig"},
			wantErrs:  map[string]string{"vgpu": `backend vgpu: plugin calls itself "impostor" but its binary is named for "vgpu"`},
		},
		{
			name:      "no common API version",
			plugins:   []bin{{"vgpu", "normal", 0o755}, {"mig", "no-common-api", 0o755}},
			wantNames: []string{"vgpu"},
			wantErrs:  map[string]string{"mig": "backend mig: no common API version: host speaks v1, v1.1, plugin speaks v0, v9"},
		},
		{
			name:     "every backend fails",
			plugins:  []bin{{"vgpu", "wrong-name", 0o755}, {"mig", "no-common-api", 0o755}, {"passthrough", "exit-at-start", 0o755}},
			wantErrs: map[string]string{"vgpu": "impostor", "mig": "no common API version", "passthrough": "backend passthrough: starting plugin"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			for _, p := range tc.plugins {
				h.install(t, p.name, p.mode, p.perm)
			}
			l, err := h.start(t, Config{})
			if err == nil {
				t.Fatal("Start succeeded")
			}
			failures := l.Failures()
			if len(failures) != len(tc.wantErrs) {
				t.Errorf("failures %v, want %d", failures, len(tc.wantErrs))
			}
			for name, want := range tc.wantErrs {
				if f := failures[name]; f == nil || !strings.Contains(f.Error(), want) {
					t.Errorf("failure of %s: %v, want %q", name, f, want)
				}
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Start error %q does not contain %q", err, want)
				}
				for _, pid := range h.pids(name) {
					if alive(pid) {
						t.Errorf("failed plugin %s (pid %d) still running", name, pid)
					}
				}
			}
			if got := l.Names(); !slices.Equal(got, tc.wantNames) {
				t.Errorf("Names() = %v, want %v", got, tc.wantNames)
			}
			for _, name := range tc.wantNames {
				b, _ := l.Backend(name)
				if h, err := b.Health(t.Context()); err != nil || !h.OK {
					t.Errorf("%s: Health() = %+v, %v", name, h, err)
				}
			}
		})
	}
}

func TestStartBadDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(t.TempDir(), "missing"), file} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			l := New(Config{Dir: dir})
			defer l.Close()
			err := l.Start(t.Context())
			if err == nil || !strings.Contains(err.Error(), "reading backend plugin dir") || !strings.Contains(err.Error(), dir) {
				t.Errorf("Start: %v, want an error reading %s", err, dir)
			}
		})
	}
}

func TestRestart(t *testing.T) {
	tests := []struct {
		name string
		mode string
		kill bool // SIGKILL the plugin while Create runs
	}{
		{"plugin exits in Create", "crash-on-create", false},
		{"plugin killed during Create", "slow-create", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.install(t, "vgpu", tc.mode, 0o755)
			l, err := h.start(t, Config{MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			first := h.pids("vgpu")[0]
			b, _ := l.Backend("vgpu")
			if tc.kill {
				go func() {
					marker := filepath.Join(h.state, fmt.Sprint("create.", first))
					for _, err := os.Stat(marker); err != nil; _, err = os.Stat(marker) {
						time.Sleep(10 * time.Millisecond)
					}
					syscall.Kill(first, syscall.SIGKILL)
				}()
			}
			start := time.Now()
			_, err = b.Create(t.Context(), backend.CreateRequest{GPU: "0000:41:00.0"})
			var e *backend.Error
			if !errors.As(err, &e) || e.Code != backend.CodeUnavailable || !strings.HasPrefix(e.Reason, "backend vgpu: plugin process") {
				t.Fatalf("Create: %#v, want CodeUnavailable from backend vgpu's plugin process", err)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("Create failed only after %v", d)
			}

			eventually(t, 30*time.Second, "backend not back", func() bool {
				_, err := b.Inventory(t.Context())
				return err == nil
			})
			inv, _ := b.Inventory(t.Context())
			pids := h.pids("vgpu")
			if len(pids) != 2 || alive(first) || inv.Notes[1] != fmt.Sprint("pid ", pids[1]) {
				t.Errorf("plugin pids %v, now served by %q; want %d dead and a second one serving", pids, inv.Notes[1], first)
			}
			if inv.Notes[0] != "api v1" {
				t.Errorf("restarted plugin not configured: %v", inv.Notes)
			}
			if len(h.records("backend plugin restarted")) != 1 {
				t.Error("restart not logged")
			}
		})
	}
}

func TestRestartBackoff(t *testing.T) {
	const min = 20 * time.Millisecond
	tests := []struct {
		name        string
		mode        string
		max         time.Duration
		stableAfter time.Duration // 0: MaxBackoff
		want        []time.Duration
	}{
		{"doubles while the plugin keeps crashing", "exit-after-config", time.Minute, 0, []time.Duration{min, 2 * min, 4 * min, 8 * min}},
		{"capped at MaxBackoff", "exit-after-config", 3 * min, time.Minute, []time.Duration{min, 2 * min, 3 * min, 3 * min}},
		{"starts over after a stable run", "exit-after-300ms", 100 * time.Millisecond, 0, []time.Duration{min, min, min}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.install(t, "vgpu", tc.mode, 0o755)
			stable := func(l *Loader) {
				if tc.stableAfter != 0 {
					l.stableAfter = tc.stableAfter
				}
			}
			if _, err := h.start(t, Config{MinBackoff: min, MaxBackoff: tc.max}, stable); err != nil {
				t.Fatal(err)
			}
			var got []time.Duration
			eventually(t, 30*time.Second, "too few restarts", func() bool {
				got = got[:0]
				for _, r := range h.records("restarting backend plugin") {
					got = append(got, time.Duration(r["backoff"].(float64)))
				}
				return len(got) >= len(tc.want)
			})
			if got = got[:len(tc.want)]; !slices.Equal(got, tc.want) {
				t.Errorf("backoffs %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCallCanceled(t *testing.T) {
	h := newHarness(t)
	h.install(t, "vgpu", "slow-create", 0o755)
	l, err := h.start(t, Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := l.Backend("vgpu")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = b.Create(ctx, backend.CreateRequest{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Create: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Create returned after %v", d)
	}
	// The plugin lives on.
	if h, err := b.Health(t.Context()); err != nil || !h.OK {
		t.Errorf("Health() = %+v, %v", h, err)
	}
	if pids := h.pids("vgpu"); len(pids) != 1 || !alive(pids[0]) {
		t.Errorf("plugin pids %v, want the first one still running", pids)
	}
}

func TestClose(t *testing.T) {
	h := newHarness(t)
	for _, name := range backend.Names {
		h.install(t, name, "normal", 0o755)
	}
	l, err := h.start(t, Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := l.Backend("vgpu")
	pids := h.pids("")
	if len(pids) != 3 {
		t.Fatalf("plugin pids %v, want 3", pids)
	}
	l.Close()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("plugin process %d still running after Close", pid)
		}
	}
	if _, err := b.Health(t.Context()); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Health after Close: %v, want CodeUnavailable", err)
	}
	if names := l.Names(); len(names) != 0 {
		t.Errorf("Names() after Close = %v", names)
	}
	l.Close() // again
	if err := l.Start(t.Context()); err == nil {
		t.Error("Start after Close succeeded")
	}
}

func TestHandleDown(t *testing.T) {
	h := &handle{name: "mig", why: "plugin process exited; restarting"}
	calls := map[string]func(context.Context) error{
		"Info":      func(ctx context.Context) error { _, err := h.Info(ctx); return err },
		"Configure": func(ctx context.Context) error { return h.Configure(ctx, backend.Config{}) },
		"Inventory": func(ctx context.Context) error { _, err := h.Inventory(ctx); return err },
		"Create":    func(ctx context.Context) error { _, err := h.Create(ctx, backend.CreateRequest{}); return err },
		"Remove":    func(ctx context.Context) error { return h.Remove(ctx, backend.RemoveRequest{}) },
		"Health":    func(ctx context.Context) error { _, err := h.Health(ctx); return err },
	}
	for method, call := range calls {
		t.Run(method, func(t *testing.T) {
			err := call(t.Context())
			want := &backend.Error{Code: backend.CodeUnavailable, Reason: "backend mig: plugin process exited; restarting"}
			if e, ok := err.(*backend.Error); !ok || *e != *want {
				t.Errorf("got %#v, want %#v", err, want)
			}
		})
	}
}

func TestDefaultDir(t *testing.T) {
	withDir, withFile, bare := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(withDir, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(withFile, "plugins"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, exe, want string }{
		{"plugins dir next to the executable", filepath.Join(withDir, "gpuvmd"), filepath.Join(withDir, "plugins")},
		{"plugins is a file", filepath.Join(withFile, "gpuvmd"), "/usr/lib/gpuvm/plugins"},
		{"no plugins dir", filepath.Join(bare, "gpuvmd"), "/usr/lib/gpuvm/plugins"},
		{"executable unknown", "", "/usr/lib/gpuvm/plugins"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := defaultDir(tc.exe); got != tc.want {
				t.Errorf("defaultDir(%q) = %q, want %q", tc.exe, got, tc.want)
			}
		})
	}
}
