package doctor

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata")

func TestDoctorHealthy(t *testing.T) {
	root := buildTree(t, "healthy")
	r := Run(context.Background(), healthyFake().env(host.NewDir(root), loadTestConfig(t)))
	for _, f := range r.Findings {
		if f.Severity != OK {
			t.Errorf("%s %s: %s %s (fix: %s)", f.Check, f.Subject, f.Severity, f.Seen, f.Fix)
		}
	}
	if len(r.Findings) < 12 {
		t.Errorf("only %d findings: %+v", len(r.Findings), r.Findings)
	}
	golden(t, "healthy.golden", r, root)
}

// Each case breaks one thing of the healthy host and expects the finding
// that names it, with a fix.
func TestDoctorFindings(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(t *testing.T, root string, h *fakeHost)
		check   string
		subject string
		want    Severity
	}{
		{"iommu off", func(t *testing.T, root string, h *fakeHost) {
			os.RemoveAll(filepath.Join(root, "kernel/iommu_groups"))
			h.files["/proc/cmdline"] = "root=/dev/sda1 ro quiet"
		}, "iommu", "", Error},
		{"iommu switched off on the command line", func(t *testing.T, root string, h *fakeHost) {
			h.files["/proc/cmdline"] = "root=/dev/sda1 intel_iommu=off"
		}, "iommu", "", Error},
		{"vfio-pci not loaded", func(t *testing.T, root string, h *fakeHost) {
			os.RemoveAll(filepath.Join(root, "module/vfio_pci"))
		}, "vfio", "", Error},
		{"no nvidia driver", func(t *testing.T, root string, h *fakeHost) {
			os.RemoveAll(filepath.Join(root, "module/nvidia"))
		}, "nvidia-driver", "", Error},
		{"not the vGPU manager", func(t *testing.T, root string, h *fakeHost) {
			os.RemoveAll(filepath.Join(root, "module/nvidia_vgpu_vfio"))
		}, "nvidia-driver", "", Error},
		{"no NVML library", func(t *testing.T, root string, h *fakeHost) {
			delete(h.stats, nvmlLibs[0])
		}, "nvml", "", Error},
		{"no nvidiactl", func(t *testing.T, root string, h *fakeHost) {
			delete(h.stats, nvidiactl)
		}, "nvml", "", Error},
		{"no sriov-manage", func(t *testing.T, root string, h *fakeHost) {
			delete(h.stats, SRIOVManage)
		}, "sriov-manage", "", Error},
		{"VFs not enabled", func(t *testing.T, root string, h *fakeHost) {
			pf := devDir(t, root, "0000:c1:00.0")
			mustWrite(t, filepath.Join(pf, "sriov_numvfs"), []byte("0"))
			os.Remove(filepath.Join(pf, "virtfn0"))
			os.Remove(filepath.Join(pf, "virtfn1"))
		}, "gpu-mode", "0000:c1:00.0", Error},
		{"vGPU manager not running", func(t *testing.T, root string, h *fakeHost) {
			for _, vf := range []string{"0000:c1:00.4", "0000:c1:00.5"} {
				os.RemoveAll(filepath.Join(devDir(t, root, vf), "nvidia"))
			}
		}, "gpu-mode", "0000:c1:00.0", Error},
		{"vGPU GPU on vfio-pci", func(t *testing.T, root string, h *fakeHost) {
			rebind(t, root, "0000:c1:00.0", "vfio-pci")
		}, "gpu-mode", "0000:c1:00.0", Error},
		{"MIG mode off", func(t *testing.T, root string, h *fakeHost) {
			h.mig["0000:18:00.0"] = false
		}, "gpu-mode", "0000:18:00.0", Error},
		{"MIG mode unknown", func(t *testing.T, root string, h *fakeHost) {
			delete(h.mig, "0000:18:00.0")
		}, "gpu-mode", "0000:18:00.0", Skipped},
		{"passthrough audio function on the host driver", func(t *testing.T, root string, h *fakeHost) {
			rebind(t, root, "0000:01:00.1", "snd_hda_intel")
		}, "gpu-mode", "0000:01:00.0", Warning},
		{"virsh missing", func(t *testing.T, root string, h *fakeHost) {
			h.failing["virsh"] = errNotFound
		}, "libvirt", "qemu:///system", Error},
		{"libvirtd down", func(t *testing.T, root string, h *fakeHost) {
			h.failing["virsh"] = errors.New("exit status 1: error: failed to connect to the hypervisor")
		}, "libvirt", "qemu:///system", Error},
		{"no KVM for QEMU", func(t *testing.T, root string, h *fakeHost) {
			delete(h.commands, "virsh -c qemu:///system domcapabilities --virttype kvm")
		}, "qemu-kvm", "qemu:///system", Warning},
		{"no storage pool: gpuvmd makes it", func(t *testing.T, root string, h *fakeHost) {
			delete(h.commands, "virsh -c qemu:///system pool-info --bytes gpuvm")
			h.failing["virsh -c qemu:///system pool-info --bytes gpuvm"] = errPoolMissing
			delete(h.stats, "/var/lib/libvirt/images/gpuvm")
		}, "storage-pool", "gpuvm", Warning},
		{"no storage pool, and QEMU could not reach it", func(t *testing.T, root string, h *fakeHost) {
			h.failing["virsh -c qemu:///system pool-info --bytes gpuvm"] = errPoolMissing
			h.stats["/var/lib/libvirt"] = fs.ModeDir | 0o750
		}, "storage-pool", "gpuvm", Error},
		{"libvirt does not say whether the pool exists", func(t *testing.T, root string, h *fakeHost) {
			h.failing["virsh -c qemu:///system pool-info --bytes gpuvm"] = errors.New("exit status 1: error: access denied")
		}, "storage-pool", "gpuvm", Error},
		{"storage pool out of QEMU's reach", func(t *testing.T, root string, h *fakeHost) {
			h.stats["/var/lib/libvirt/images/gpuvm"] = fs.ModeDir | 0o700
		}, "storage-pool", "gpuvm", Error},
		{"storage pool inactive", func(t *testing.T, root string, h *fakeHost) {
			k := "virsh -c qemu:///system pool-info --bytes gpuvm"
			h.commands[k] = strings.Replace(h.commands[k], "running", "inactive", 1)
		}, "storage-pool", "gpuvm", Error},
		{"storage pool nearly full", func(t *testing.T, root string, h *fakeHost) {
			k := "virsh -c qemu:///system pool-info --bytes gpuvm"
			h.commands[k] = strings.Replace(h.commands[k], "900184397415", "1073741824", 1)
		}, "storage-pool", "gpuvm", Warning},
		{"no /dev/kvm", func(t *testing.T, root string, h *fakeHost) {
			delete(h.stats, "/dev/kvm")
		}, "kvm", "", Warning},
		{"/dev/kvm root only", func(t *testing.T, root string, h *fakeHost) {
			h.stats["/dev/kvm"] = 0o600
		}, "kvm", "", Warning},
		{"no virtiofsd", func(t *testing.T, root string, h *fakeHost) {
			h.vhostUser = "testdata/vhost-user-none"
		}, "virtiofsd", "", Error},
		{"libvirtd not root, low memlock", func(t *testing.T, root string, h *fakeHost) {
			h.files["/proc/812/status"] = "Name:\tlibvirtd\nUid:\t998\t998\t998\t998\n"
		}, "memlock", "", Error},
		{"database unreachable", func(t *testing.T, root string, h *fakeHost) {
			h.db = func() (string, Severity, string) {
				return "postgres://db/gpuvm: connection refused", Error, "systemctl start postgresql"
			}
		}, "database", "", Error},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := buildTree(t, "healthy")
			h := healthyFake()
			c.breakIt(t, root, h)
			r := Run(context.Background(), h.env(host.NewDir(root), loadTestConfig(t)))
			var got *Finding
			for i, f := range r.Findings {
				if f.Check == c.check && f.Subject == c.subject {
					got = &r.Findings[i]
				} else if f.Severity != OK {
					t.Errorf("another finding: %s %s: %s %s", f.Check, f.Subject, f.Severity, f.Seen)
				}
			}
			if got == nil {
				t.Fatalf("no %s %s finding in %+v", c.check, c.subject, r.Findings)
			}
			if got.Severity != c.want {
				t.Fatalf("%s %s: %s %q, want %s", c.check, c.subject, got.Severity, got.Seen, c.want)
			}
			if c.want != Skipped && got.Fix == "" {
				t.Errorf("%s %s: no fix for %q", c.check, c.subject, got.Seen)
			}
			if wantProblems := map[bool]int{true: 1, false: 0}[c.want == Error]; r.Problems() != wantProblems {
				t.Errorf("Problems() = %d, want %d", r.Problems(), wantProblems)
			}
		})
	}
}

// A host with several problems, as people read it.
func TestDoctorTextGolden(t *testing.T) {
	root := buildTree(t, "healthy")
	h := healthyFake()
	os.RemoveAll(filepath.Join(root, "module/nvidia_vgpu_vfio"))
	h.mig["0000:18:00.0"] = false
	rebind(t, root, "0000:01:00.1", "snd_hda_intel")
	h.stats["/dev/kvm"] = 0o600
	r := Run(context.Background(), h.env(host.NewDir(root), loadTestConfig(t)))
	if r.Problems() != 2 {
		t.Errorf("Problems() = %d, want 2", r.Problems())
	}
	golden(t, "problems.golden", r, root)
}

// The simulator presets: their GPUs, on the simulator's sysfs and NVML.
func TestDoctorSimulator(t *testing.T) {
	for _, preset := range sim.Presets() {
		t.Run(preset, func(t *testing.T) {
			s, err := sim.Open(t.TempDir(), preset)
			if err != nil {
				t.Fatal(err)
			}
			h := healthyFake()
			e := h.env(s, loadTestConfig(t))
			e.Simulated = preset
			r := Run(context.Background(), e)
			if !strings.Contains(r.Host, "simulated") {
				t.Errorf("host %q does not say it is simulated", r.Host)
			}
			var gpus int
			for _, f := range r.Findings {
				if f.Check == "gpu-mode" {
					gpus++
				}
				switch f.Check {
				case "iommu", "vfio", "gpus", "nvidia-driver", "nvml", "sriov-manage":
					if f.Severity == Error || f.Severity == Warning {
						t.Errorf("%s on the simulator: %s %s", f.Check, f.Severity, f.Seen)
					}
				}
			}
			if gpus == 0 {
				t.Errorf("no GPU checked on %s: %+v", preset, r.Findings)
			}
		})
	}
}

func golden(t *testing.T, name string, r Report, root string) {
	t.Helper()
	r.Host = strings.ReplaceAll(r.Host, root, "TREE")
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (go test ./pkg/doctor -run %s -update writes it)", err, t.Name())
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("text output differs from %s (rerun with -update after checking):\n%s", p, b.String())
	}
}

// Without a usable /dev/kvm gpuvmd runs guests under software emulation:
// the kvm check says so, as a warning, never an error.
func TestKVMCheckWithoutKVM(t *testing.T) {
	dev := fakeInfo{"kvm", fs.ModeDevice | fs.ModeCharDevice | 0o660}
	for _, tc := range []struct {
		name   string
		stat   error
		open   error
		want   Severity
		saying string
	}{
		{"missing", fs.ErrNotExist, nil, Warning, "/dev/kvm is missing"},
		{"cannot be opened", nil, errors.New("open /dev/kvm: no such device"), Warning, "/dev/kvm cannot be opened (open /dev/kvm: no such device)"},
		{"usable", nil, nil, OK, "/dev/kvm usable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Env{
				Stat: func(string) (fs.FileInfo, error) {
					if tc.stat != nil {
						return nil, tc.stat
					}
					return dev, nil
				},
				OpenRW: func(string) error { return tc.open },
			}
			f := checkKVM(e)
			if len(f) != 1 || f[0].Severity != tc.want || !strings.Contains(f[0].Seen, tc.saying) {
				t.Fatalf("%+v, want %s saying %q", f, tc.want, tc.saying)
			}
			if emulated := strings.Contains(f[0].Seen, "software emulation"); emulated != (tc.want != OK) {
				t.Errorf("%q: says software emulation: %v", f[0].Seen, emulated)
			}
		})
	}
}
