package doctor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host"
)

// findingOf runs the whole doctor on the healthy tree with h and returns the
// one finding of check.
func findingOf(t *testing.T, h *fakeHost, check string, edit func(e *Env)) Finding {
	t.Helper()
	e := h.env(host.NewDir(buildTree(t, "healthy")), loadTestConfig(t))
	if edit != nil {
		edit(&e)
	}
	var out []Finding
	for _, f := range Run(context.Background(), e).Findings {
		if f.Check == check {
			out = append(out, f)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d findings of %s: %+v", len(out), check, out)
	}
	return out[0]
}

func wantFinding(t *testing.T, f Finding, sev Severity, seen ...string) {
	t.Helper()
	if f.Severity != sev {
		t.Errorf("%s: %s %q, want %s", f.Check, f.Severity, f.Seen, sev)
	}
	for _, s := range seen {
		if !strings.Contains(f.Seen, s) {
			t.Errorf("%s: seen %q lacks %q", f.Check, f.Seen, s)
		}
	}
	if (sev == Error || sev == Warning) && f.Fix == "" {
		t.Errorf("%s: %s without a fix", f.Check, sev)
	}
}

func TestDoctorClockSkew(t *testing.T) {
	tests := []struct {
		name string
		skew time.Duration
		err  error
		none string // NoRemoteClock; the clock is left out
		want Severity
		seen []string
	}{
		{"in step", 40 * time.Millisecond, nil, "", OK, []string{"40ms ahead of"}},
		{"behind", -300 * time.Millisecond, nil, "", OK, []string{"300ms behind"}},
		{"a few seconds", 3 * time.Second, nil, "", Warning, []string{"3s ahead of", "leases and events disagree"}},
		{"behind by a minute", -time.Minute, nil, "", Error, []string{"1m0s behind", "heartbeats look late"}},
		{"clock unreadable", 0, errors.New("connection refused"), "", Warning, []string{"could not read its clock: connection refused"}},
		{"SQLite", 0, nil, "SQLite: one server, no database server's clock to compare with", Skipped, []string{"SQLite"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := healthyFake()
			h.clock.skew, h.clock.err = tc.skew, tc.err
			f := findingOf(t, h, "clock", func(e *Env) {
				if tc.none != "" {
					e.RemoteClock, e.NoRemoteClock = nil, tc.none
				}
			})
			wantFinding(t, f, tc.want, tc.seen...)
			if tc.none == "" && f.Subject != "PostgreSQL at db.example:5432" {
				t.Errorf("subject %q", f.Subject)
			}
		})
	}
}

// The round trip to the clock is allowed for: a remote clock read half way
// through a slow round trip is in step.
func TestDoctorClockRoundTrip(t *testing.T) {
	base := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	calls := 0
	e := Env{RemoteClock: &fakeClock{now: base, skew: time.Second}, Now: func() time.Time {
		calls++
		if calls == 1 {
			return base
		}
		return base.Add(2 * time.Second) // the answer took 2 s; the server read it at base+1s
	}}
	f := checkClock(context.Background(), e)
	wantFinding(t, f, OK, "0s ahead of", "±1s")
}

func TestDoctorDriverBranch(t *testing.T) {
	tests := []struct {
		name    string
		driver  *Driver
		modes   []gpu.Mode // nil: the healthy configuration (vgpu and mig GPUs)
		sim     string
		want    Severity
		seen    []string
		noCheck bool
	}{
		{"vGPU 17 manager", &Driver{Version: "550.54.16", VGPUMin: "16.0", VGPUMax: "17.3"}, nil, "", OK,
			[]string{"R550, vGPU software 17", "vGPU 16.0 to 17.3"}, false},
		{"not the vGPU manager", &Driver{Version: "550.54.15"}, nil, "", Error, []string{"not the vGPU manager"}, false},
		{"a branch vGPU software never had", &Driver{Version: "560.35.03", VGPUMin: "17.0", VGPUMax: "17.4"}, nil, "", Warning,
			[]string{"R560 is not a branch of NVIDIA vGPU software", "R550 (vGPU 17)"}, false},
		{"passthrough only, any driver", &Driver{Version: "560.35.03"}, []gpu.Mode{gpu.ModePassthrough}, "", OK, []string{"R560; no GPU is configured"}, false},
		{"passthrough only, a vGPU branch", &Driver{Version: "535.216.01"}, []gpu.Mode{gpu.ModePassthrough}, "", OK, []string{"vGPU software 16"}, false},
		{"version without a branch", &Driver{Version: "simulated"}, nil, "", Warning, []string{"names no branch"}, false},
		{"not read", nil, nil, "", Skipped, []string{"no backend answered"}, false},
		{"the simulator", &Driver{Version: "550.00 (simulated)"}, nil, "h100x8", Skipped, []string{"simulator"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := healthyFake()
			h.driver = tc.driver
			e := h.env(host.NewDir(buildTree(t, "healthy")), loadTestConfig(t))
			e.Simulated = tc.sim
			modes := modeSet{"0000:c1:00.0": gpu.ModeVGPU, "0000:18:00.0": gpu.ModeMIG}
			if tc.modes != nil {
				modes = modeSet{}
				for i, m := range tc.modes {
					modes[string(rune('a'+i))] = m
				}
			}
			f := checkDriverBranch(context.Background(), e, modes)
			wantFinding(t, f, tc.want, tc.seen...)
		})
	}
}

func TestDoctorLicensing(t *testing.T) {
	tests := []struct {
		name, server string
		dialErr      error
		want         Severity
		seen         []string
	}{
		{"not configured", "", nil, Skipped, []string{"no license_server"}},
		{"reachable", "dls.example:443", nil, OK, []string{"dls.example:443 accepts connections"}},
		{"no port: HTTPS", "dls.example", nil, OK, []string{"dls.example:443"}},
		{"unreachable", "dls.example:443", errors.New("dial tcp 10.0.0.9:443: i/o timeout"), Error, []string{"cannot reach dls.example:443", "i/o timeout"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := healthyFake()
			h.license, h.dialErr = tc.server, tc.dialErr
			wantFinding(t, findingOf(t, h, "licensing", nil), tc.want, tc.seen...)
		})
	}
}

// The token file gpuvmd gives the guests: read as gpuvmd reads it.
func TestDoctorLicenseToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "client.tok")
	empty := filepath.Join(dir, "empty.tok")
	if err := os.WriteFile(good, []byte("eyJhbGciOiJSUzI1NiJ9.e30.c2ln\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token string
		want        Severity
		seen        []string
	}{
		{"not configured", "", Skipped, []string{"not configured"}},
		{"a token", good, OK, []string{"a client configuration token"}},
		{"empty", empty, Error, []string{"is empty", "licensed VMs fail"}},
		{"missing", filepath.Join(dir, "nope.tok"), Error, []string{"no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := healthyFake()
			h.token = tc.token
			wantFinding(t, findingOf(t, h, "licensing-token", nil), tc.want, tc.seen...)
		})
	}
}

func TestDoctorSchema(t *testing.T) {
	tests := []struct {
		name string
		v    SchemaVersions
		why  string
		want Severity
		seen []string
	}{
		{"same", SchemaVersions{9, "PostgreSQL", 9, "gpuvmd 1.2.0"}, "", OK, []string{"schema version 9 (PostgreSQL), as gpuvmd 1.2.0 knows"}},
		{"to migrate", SchemaVersions{8, "PostgreSQL", 9, "gpuvmd 1.2.0"}, "", OK, []string{"migrates it to 9"}},
		{"newer than gpuvmd", SchemaVersions{10, "/var/lib/gpuvm/schema-version", 9, "gpuvmd 1.2.0"}, "", Error,
			[]string{"schema version 10", "newer than the 9", "refuses to start"}},
		{"no database yet", SchemaVersions{-1, "", 9, "gpuvmd 1.2.0"}, "SQLite not created yet", OK, []string{"no database schema yet (SQLite not created yet)", "creates schema version 9"}},
		{"no gpuvmd", SchemaVersions{9, "PostgreSQL", -1, ""}, "gpuvmd: executable file not found in $PATH", Skipped, []string{"not found"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := healthyFake()
			f := findingOf(t, h, "schema", func(e *Env) {
				e.Schema = func(context.Context) (SchemaVersions, string) { return tc.v, tc.why }
			})
			wantFinding(t, f, tc.want, tc.seen...)
		})
	}
}
