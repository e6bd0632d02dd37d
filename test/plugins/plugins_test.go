// Package plugins_test drives the real backend binaries over go-plugin, on
// every simulated preset: what they report, what they create, and that every
// create-then-remove leaves the simulated host exactly as it was.
package plugins_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/backend/loader"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
	"github.com/gpuvm/gpuvm/test/testbin"
)

var pluginDir string

// TestMain builds the three backend binaries once (or uses the ones in
// $GPUVM_PLUGIN_DIR) so the tests run the very binaries gpuvmd runs.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, cleanup, err := testbin.Plugins()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cleanup()
		pluginDir = dir
		return m.Run()
	}())
}

type rig struct {
	l        *loader.Loader
	host     *sim.Host
	stateDir string
}

func start(t *testing.T, preset string) *rig {
	t.Helper()
	return startIn(t, preset, t.TempDir(), "")
}

// startIn starts the backends on stateDir for a gpuvm installation.
func startIn(t *testing.T, preset, stateDir, installation string) *rig {
	t.Helper()
	return startLoader(t, preset, stateDir, loader.Config{MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second,
		Backend: backend.Config{Installation: installation}})
}

// startLoader starts the backends on preset's simulated host in stateDir,
// with cfg's other settings (backoff, inventory pushes, installation).
func startLoader(t *testing.T, preset, stateDir string, cfg loader.Config) *rig {
	t.Helper()
	cfg.Dir = pluginDir
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Backend.Simulate, cfg.Backend.StateDir, cfg.Backend.NVML = preset, stateDir, backend.NVMLAuto
	l := loader.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.Start(ctx); err != nil {
		t.Fatalf("start backends: %v", err)
	}
	t.Cleanup(l.Close)
	h, err := sim.Open(sim.StateDir(stateDir, preset), preset)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{l: l, host: h, stateDir: stateDir}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func (r *rig) backend(t *testing.T, name string) backend.Backend {
	t.Helper()
	b, ok := r.l.Backend(name)
	if !ok {
		t.Fatalf("backend %s not running", name)
	}
	return b
}

func (r *rig) snapshot(t *testing.T) []byte {
	t.Helper()
	b, err := r.host.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// request picks something the backend says it can create on g now.
func request(name string, g backend.GPU) (backend.CreateRequest, bool) {
	req := backend.CreateRequest{GPU: g.Address, VMUUID: "0b7e6f1c-6a47-4f36-9d54-3c1a2b3c4d5e"}
	switch name {
	case backend.NamePassthrough:
		return req, true
	case backend.NameMIG:
		for _, p := range g.MIGProfiles {
			if len(p.FreeStarts) > 0 {
				// Take the last free start: it is never NVML's first-fit choice.
				req.Profile, req.Placement = p.Name, p.FreeStarts[len(p.FreeStarts)-1]
				return req, true
			}
		}
	case backend.NameVGPU:
		for _, vt := range g.VGPUTypes {
			if vt.Available > 0 {
				req.Type = vt.Name
				return req, true
			}
		}
	}
	return req, false
}

// Every backend, every preset, every GPU it calls ready: create then remove
// returns the simulated host to exactly its previous state, and the device
// shows in the inventory in between with the hostdev REFERENCE.md gives.
func TestCreateRemoveRestoresHost(t *testing.T) {
	for _, preset := range sim.Presets() {
		t.Run(preset, func(t *testing.T) {
			r := start(t, preset)
			created := 0
			for _, name := range backend.Names {
				b := r.backend(t, name)
				inv, err := b.Inventory(ctx(t))
				if err != nil {
					t.Fatalf("%s inventory: %v", name, err)
				}
				if !inv.Simulated {
					t.Errorf("%s inventory does not say it is simulated", name)
				}
				for _, g := range inv.GPUs {
					if g.Unavailable != "" {
						continue
					}
					req, ok := request(name, g)
					if !ok {
						continue
					}
					t.Run(name+"/"+g.Address, func(t *testing.T) {
						before := r.snapshot(t)
						dev, err := b.Create(ctx(t), req)
						if err != nil {
							t.Fatalf("create %+v: %v", req, err)
						}
						checkHostdev(t, name, g, dev)
						if bytes.Equal(before, r.snapshot(t)) {
							t.Fatal("create changed nothing on the host")
						}
						inv2, err := b.Inventory(ctx(t))
						if err != nil {
							t.Fatal(err)
						}
						found := false
						for _, d := range inv2.Devices {
							if d.ID == dev.ID {
								found = d.Managed && d.VMUUID == req.VMUUID
							}
						}
						if !found {
							t.Errorf("device %s missing from the inventory or not marked as gpuvm's", dev.ID)
						}
						if err := b.Remove(ctx(t), backend.RemoveRequest{ID: dev.ID, GPU: g.Address}); err != nil {
							t.Fatalf("remove: %v", err)
						}
						if after := r.snapshot(t); !bytes.Equal(before, after) {
							t.Errorf("host differs after create+remove:\nbefore %s\nafter  %s", before, after)
						}
						if err := b.Remove(ctx(t), backend.RemoveRequest{ID: dev.ID}); err != nil {
							t.Errorf("second remove: %v", err)
						}
					})
					created++
				}
			}
			if created == 0 {
				t.Fatal("no backend could create anything on this preset")
			}
		})
	}
}

func checkHostdev(t *testing.T, name string, g backend.GPU, d backend.Device) {
	t.Helper()
	h := d.Hostdev
	switch {
	case name == backend.NamePassthrough:
		if h.Type != backend.HostdevPCI || !h.Managed || len(h.Addresses) == 0 || h.Addresses[0] != g.Address {
			t.Errorf("passthrough hostdev %+v", h)
		}
	case g.Interface == "vendor-vfio":
		if h.Type != backend.HostdevPCI || h.Managed || len(h.Addresses) != 1 || h.Addresses[0] == g.Address {
			t.Errorf("vendor-VFIO hostdev must be the VF with managed='no': %+v", h)
		}
	case g.Interface == "mdev":
		if h.Type != backend.HostdevMdev || h.UUID == "" || h.UUID != d.ID {
			t.Errorf("mdev hostdev %+v", h)
		}
	default:
		t.Errorf("unexpected interface %q", g.Interface)
	}
}

// Bad requests are refused with the right code and leave the host as it was.
func TestRefusals(t *testing.T) {
	r := start(t, "mixed")
	const (
		a100 = "0000:17:00.0" // MIG on, mdev on VFs
		a40  = "0000:41:00.0" // time-sliced mdev
		l40s = "0000:81:00.0" // vendor VFIO
		h100 = "0000:9a:00.0" // vendor VFIO, MIG on
		rtx  = "0000:c1:00.0" // passthrough only
	)
	vgpu, mig, pt := r.backend(t, backend.NameVGPU), r.backend(t, backend.NameMIG), r.backend(t, backend.NamePassthrough)
	// A first vGPU so that equal-size mode and UUID clashes can be shown.
	first, err := vgpu.Create(ctx(t), backend.CreateRequest{GPU: a40, Type: "A40-8Q", DeviceUUID: "11111111-2222-4333-8444-555555555555"})
	if err != nil {
		t.Fatal(err)
	}
	defer vgpu.Remove(ctx(t), backend.RemoveRequest{ID: first.ID})
	gi, err := mig.Create(ctx(t), backend.CreateRequest{GPU: h100, Profile: "3g.40gb", Placement: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer mig.Remove(ctx(t), backend.RemoveRequest{ID: gi.ID})
	tests := []struct {
		name string
		b    backend.Backend
		req  backend.CreateRequest
		want *backend.Error
	}{
		{"unknown type", vgpu, backend.CreateRequest{GPU: l40s, Type: "L40S-7Q"}, backend.ErrInvalid},
		{"type of another board", vgpu, backend.CreateRequest{GPU: l40s, Type: "A40-8Q"}, backend.ErrInvalid},
		{"malformed type", vgpu, backend.CreateRequest{GPU: l40s, Type: "big"}, backend.ErrInvalid},
		{"second type in equal-size mode", vgpu, backend.CreateRequest{GPU: a40, Type: "A40-4Q"}, backend.ErrConflict},
		{"UUID in use", vgpu, backend.CreateRequest{GPU: a40, Type: "A40-8Q", DeviceUUID: first.ID}, backend.ErrConflict},
		{"time-sliced on a MIG GPU", vgpu, backend.CreateRequest{GPU: a100, Type: "A100-4C"}, backend.ErrConflict},
		{"no such GPU", vgpu, backend.CreateRequest{GPU: "0000:77:00.0", Type: "A40-8Q"}, backend.ErrNotFound},
		{"path in address", vgpu, backend.CreateRequest{GPU: "../../../etc", Type: "A40-8Q"}, backend.ErrInvalid},
		{"MIG on a non-MIG GPU", mig, backend.CreateRequest{GPU: l40s, Profile: "3g.40gb"}, backend.ErrInvalid},
		{"unknown MIG profile", mig, backend.CreateRequest{GPU: h100, Profile: "5g.50gb"}, backend.ErrInvalid},
		{"placement not allowed", mig, backend.CreateRequest{GPU: h100, Profile: "3g.40gb", Placement: 2}, backend.ErrInvalid},
		{"placement taken", mig, backend.CreateRequest{GPU: h100, Profile: "1g.10gb", Placement: 5}, backend.ErrExhausted},
		{"passthrough of a vGPU GPU", pt, backend.CreateRequest{GPU: a40}, backend.ErrConflict},
		{"passthrough with a type", pt, backend.CreateRequest{GPU: rtx, Type: "A40-8Q"}, backend.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := r.snapshot(t)
			_, err := tc.b.Create(ctx(t), tc.req)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v (code %s), want code %s", err, backend.CodeOf(err), tc.want.Code)
			}
			var be *backend.Error
			if errors.As(err, &be) && tc.req.GPU != "" && be.GPU == "" && be.Code != backend.CodeInvalid {
				t.Errorf("error %q does not name the GPU", err)
			}
			if !bytes.Equal(before, r.snapshot(t)) {
				t.Error("refused create changed the host")
			}
		})
	}
	// Exhaust a type: A40-24Q allows 2 per GPU, on the other VFs of the GPU
	// (equal-size mode forbids it while A40-8Q exists, so use the L40S).
	var made []string
	for i := 0; i < 2; i++ {
		d, err := vgpu.Create(ctx(t), backend.CreateRequest{GPU: l40s, Type: "L40S-24Q"})
		if err != nil {
			t.Fatalf("L40S-24Q #%d: %v", i+1, err)
		}
		made = append(made, d.ID)
	}
	if _, err := vgpu.Create(ctx(t), backend.CreateRequest{GPU: l40s, Type: "L40S-24Q"}); !errors.Is(err, backend.ErrExhausted) {
		t.Errorf("third L40S-24Q: %v, want exhausted", err)
	}
	for _, id := range made {
		if err := vgpu.Remove(ctx(t), backend.RemoveRequest{ID: id}); err != nil {
			t.Error(err)
		}
	}
	// A device in use by a VM cannot be removed; the ledger keeps it for a retry.
	if err := r.host.SetInUse(first.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := vgpu.Remove(ctx(t), backend.RemoveRequest{ID: first.ID}); !errors.Is(err, backend.ErrConflict) {
		t.Errorf("remove of a busy mdev: %v", err)
	}
	r.host.SetInUse(first.ID, false)
	if err := vgpu.Remove(ctx(t), backend.RemoveRequest{ID: first.ID}); err != nil {
		t.Errorf("remove after release: %v", err)
	}
}

// A backend killed mid-life is restarted by the loader; calls in between fail
// cleanly with CodeUnavailable and gpuvmd (here, the test) lives on.
func TestBackendCrashRestart(t *testing.T) {
	r := start(t, "l40sx4")
	b := r.backend(t, backend.NameVGPU)
	if _, err := b.Inventory(ctx(t)); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(pluginDir, backend.BinaryPrefix+backend.NameVGPU)
	out, _ := exec.Command("pgrep", "-f", "^"+bin+"$").Output()
	var pid int
	if _, err := fmt.Sscan(string(out), &pid); err != nil {
		t.Fatalf("find the plugin process: %q", out)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := b.Inventory(ctx(t))
		if err == nil {
			break
		}
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("call to a killed backend: %v, want CodeUnavailable", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("backend was not restarted")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The restart may win the race with the first call; either way calls
	// between the kill and the restart failed only with CodeUnavailable.
	d, err := b.Create(ctx(t), backend.CreateRequest{GPU: "0000:01:00.0", Type: "L40S-12Q"})
	if err != nil {
		t.Fatalf("create after restart: %v", err)
	}
	if err := b.Remove(ctx(t), backend.RemoveRequest{ID: d.ID}); err != nil {
		t.Fatal(err)
	}
}

// Two gpuvm installations on one state directory (a test instance pointed
// at a production host's, or a copied ledger): every backend records the
// installation that made a device, shows it in the inventory, and refuses
// to remove another installation's device, leaving the host as it was,
// unless an admin confirmed which installation the orphan is of.
func TestInstallationsKeepTheirDevices(t *testing.T) {
	const preset = "h100x8"
	const instA, instB = "0f6f1a52-9a40-4c3e-8d7e-2b1f3c4d5e6f", "7c1d2e3f-4a5b-4c6d-9e7f-8a9b0c1d2e3f"
	dir := t.TempDir()
	for _, name := range backend.Names {
		t.Run(name, func(t *testing.T) {
			a := startIn(t, preset, dir, instA)
			ba := a.backend(t, name)
			inv, err := ba.Inventory(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			var req backend.CreateRequest
			found := false
			for _, g := range inv.GPUs {
				if g.Unavailable != "" {
					continue
				}
				if req, found = request(name, g); found {
					break
				}
			}
			if !found {
				t.Fatalf("%s: nothing to create on %s", name, preset)
			}
			before := a.snapshot(t)
			d, err := ba.Create(ctx(t), req)
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if d.Installation != instA {
				t.Fatalf("created device says installation %q, want %q", d.Installation, instA)
			}
			a.l.Close()

			b := startIn(t, preset, dir, instB)
			bb := b.backend(t, name)
			inv, err = bb.Inventory(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			var seen *backend.Device
			for i := range inv.Devices {
				if inv.Devices[i].ID == d.ID {
					seen = &inv.Devices[i]
				}
			}
			if seen == nil || seen.Installation != instA || !seen.Managed {
				t.Fatalf("installation B's inventory shows %+v for the device A made", seen)
			}
			during := b.snapshot(t)
			err = bb.Remove(ctx(t), backend.RemoveRequest{ID: d.ID, GPU: d.GPU})
			if backend.CodeOf(err) != backend.CodeConflict || !strings.Contains(err.Error(), instA) {
				t.Fatalf("installation B removing A's device: %v, want a conflict naming %s", err, instA)
			}
			if !bytes.Equal(during, b.snapshot(t)) {
				t.Fatal("the refused remove changed the host")
			}
			err = bb.Remove(ctx(t), backend.RemoveRequest{ID: d.ID, GPU: d.GPU, OfInstallation: instB})
			if backend.CodeOf(err) != backend.CodeConflict {
				t.Fatalf("removing with the wrong installation confirmed: %v, want a conflict", err)
			}
			// An admin of B confirmed it is A's orphan: removed.
			if err := bb.Remove(ctx(t), backend.RemoveRequest{ID: d.ID, GPU: d.GPU, OfInstallation: instA}); err != nil {
				t.Fatalf("removing the orphan with its installation confirmed: %v", err)
			}
			if !bytes.Equal(before, b.snapshot(t)) {
				t.Fatal("the host is not as it was before the create")
			}
		})
	}
}
