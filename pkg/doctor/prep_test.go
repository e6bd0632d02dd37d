package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
)

// A captured tree after a reboot: VFs gone, MIG mode off, the passthrough
// GPU back on nvidia and its audio on snd_hda_intel. The sysfs writes land
// in the tree; the commands go to a fake runner.
func TestHostPrepCapturedTree(t *testing.T) {
	root := buildTree(t, "healthy")
	pf := devDir(t, root, "0000:c1:00.0")
	mustWrite(t, filepath.Join(pf, "sriov_numvfs"), []byte("0"))
	os.Remove(filepath.Join(pf, "virtfn0"))
	os.Remove(filepath.Join(pf, "virtfn1"))
	rebind(t, root, "0000:01:00.0", "nvidia")
	rebind(t, root, "0000:01:00.1", "snd_hda_intel")
	for _, f := range []string{"bus/pci/drivers/nvidia/unbind", "bus/pci/drivers/snd_hda_intel/unbind", "bus/pci/drivers_probe"} {
		mustWrite(t, filepath.Join(root, f), nil)
	}
	var ran []string
	e := PrepEnv{Sys: host.NewDir(root), Config: loadTestConfig(t),
		MIGMode: func(context.Context, string) (bool, bool, string) { return false, true, "" },
		Run: func(_ context.Context, name string, args ...string) ([]byte, error) {
			ran = append(ran, strings.Join(append([]string{name}, args...), " "))
			if name == "nvidia-smi" {
				return []byte("Warning: MIG mode is in pending enable state for GPU 00000000:18:00.0:In use by another client\nAll done."), nil
			}
			return nil, nil
		}}
	steps, err := Plan(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	var dry strings.Builder
	if err := WriteSteps(&dry, steps, nil, true); err != nil {
		t.Fatal(err)
	}
	goldenText(t, "prep-dryrun.golden", dry.String())
	if len(ran) != 0 {
		t.Fatalf("the plan ran commands: %v", ran)
	}

	outcomes := Apply(context.Background(), e, steps)
	want := []string{"nvidia-smi -i 0000:18:00.0 -mig 1", SRIOVManage + " -e 0000:c1:00.0"}
	if strings.Join(ran, "\n") != strings.Join(want, "\n") {
		t.Errorf("ran %q, want %q", ran, want)
	}
	for f, want := range map[string]string{
		filepath.Join(devDir(t, root, "0000:01:00.0"), "driver_override"): "vfio-pci",
		filepath.Join(devDir(t, root, "0000:01:00.1"), "driver_override"): "vfio-pci",
		filepath.Join(root, "bus/pci/drivers/nvidia/unbind"):              "0000:01:00.0",
		filepath.Join(root, "bus/pci/drivers/snd_hda_intel/unbind"):       "0000:01:00.1",
		filepath.Join(root, "bus/pci/drivers_probe"):                      "0000:01:00.1",
	} {
		if b, _ := os.ReadFile(f); string(b) != want {
			t.Errorf("%s = %q, want %q", f, b, want)
		}
	}
	if Failed(outcomes) != 1 {
		t.Errorf("Failed = %d, want 1 (the MIG reset)", Failed(outcomes))
	}
	for _, o := range outcomes {
		if strings.HasPrefix(strings.Join(o.Argv, " "), "nvidia-smi") && !o.ResetNeeded {
			t.Errorf("the pending MIG mode is not reported as needing a reset: %+v", o)
		}
	}
}

// On the simulator, which applies the kernel's rules to the writes, a second
// run has nothing left to do.
func TestHostPrepSimulatorIdempotent(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "server.hcl"), []byte(`server {
  host {
    simulate = "mixed"
    gpu "0000:c1:00.0" {
      mode = "passthrough"
    }
    gpu "0000:81:00.0" {
      mode = "vgpu"
    }
  }
}
`))
	l := new(config.Loader)
	cfg, diags := l.LoadDir(dir)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	s, err := sim.Open(t.TempDir(), "mixed")
	if err != nil {
		t.Fatal(err)
	}
	e := PrepEnv{Sys: s, Config: cfg, Simulated: true}
	steps, err := Plan(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	writes := 0
	for _, st := range steps {
		if st.Path != "" {
			writes++
		}
	}
	if writes < 4 {
		t.Fatalf("want the 4090 and its audio bound to vfio-pci, got %+v", steps)
	}
	for _, o := range Apply(context.Background(), e, steps) {
		if o.Err != "" {
			t.Errorf("%s: %s", o.What, o.Err)
		}
	}
	for _, a := range []string{"0000:c1:00.0", "0000:c1:00.1"} {
		d, err := host.ReadPCIDevice(s, a)
		if err != nil || d.Driver != "vfio-pci" {
			t.Errorf("%s: driver %q (%v), want vfio-pci", a, d.Driver, err)
		}
	}
	again, err := Plan(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range again {
		if !st.Done {
			t.Errorf("second run: %+v", st)
		}
	}
}

func goldenText(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (-update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("differs from %s (rerun with -update after checking):\n%s", p, got)
	}
}
