package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

func TestProfileRenderDomain(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--config", "../../configs/dev", "tiny-mig"}, []string{`type="pci" managed="no"`, "simulated h100x8: mig 1g.10gb@6", "<kernel>"}}, // the scheduler keeps slot 0 for larger profiles
		{[]string{"--config", "../../configs/dev", "tiny-vgpu"}, []string{`type="pci" managed="no"`, "vgpu H100-4C on GPU 0000:9a:00.0"}},
		{[]string{"--config", "../../configs/dev", "tiny-gpu"}, []string{`type="pci" managed="yes"`, `bus="0xdb"`}},
		{[]string{"--config", "../../configs/dev", "tiny"}, []string{"no GPU"}},
		{[]string{"--config", "../../configs/dev", "--domain-type", "qemu", "tiny"}, []string{`<domain type="qemu"`, "domain type qemu"}},
		{[]string{"--config", "../../configs/dev", "--simulate", "mixed", "tiny-any"}, []string{"simulated mixed"}},
		{[]string{"--config", "../../configs/studio", "artist"}, []string{`type="mdev"`, "placeholders", `<graphics type="spice"`, `display="on"`, "<tpm", "virtio-win.iso"}},
	}
	validate, _ := exec.LookPath("virt-xml-validate")
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := runCLI(t, append([]string{"profile", "render-domain"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if validate == "" {
				return
			}
			f := filepath.Join(t.TempDir(), "d.xml")
			os.WriteFile(f, []byte(out), 0o644)
			if b, err := exec.Command(validate, f, "domain").CombinedOutput(); err != nil {
				t.Errorf("virt-xml-validate: %v\n%s", err, b)
			}
		})
	}
	if _, errOut, code := runCLI(t, "profile", "render-domain", "--config", "../../configs/dev", "--domain-type", "xen", "tiny"); code == 0 || !strings.Contains(errOut, `domain type: "xen"`) {
		t.Errorf("bad domain type: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "profile", "render-domain", "--config", "../../configs/dev", "tiny-mgi"); code != 1 || !strings.Contains(errOut, `no profile "tiny-mgi"`) {
		t.Errorf("unknown profile: exit %d, %q", code, errOut)
	}
}

// gpuvm show says when a vGPU's guest holds no licence, in words that say
// what it means, and nothing when the state is not known.
func TestPrintVMLicense(t *testing.T) {
	for lic, want := range map[string]string{
		api.VGPULicensed:   "device 0000:41:00.4, licensed",
		api.VGPUGrace:      "NOT LICENSED (grace period: it will be throttled)",
		api.VGPUUnlicensed: "NOT LICENSED (throttled: see the server's licensing block)",
		"":                 "device 0000:41:00.4\n",
	} {
		vm := api.VM{Name: "box", State: "running", GPUs: []api.VMGPU{{Address: "0000:41:00.0", Kind: "vgpu", Type: "L40S-12Q", Device: "0000:41:00.4", License: lic}}}
		var b strings.Builder
		if err := printVM(&b, vm, time.Now()); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), want) {
			t.Errorf("licence %q: show lacks %q:\n%s", lic, want, b.String())
		}
	}
}

// gpuvm show prints what the VM's state allows, with the server's reasons
// (testdata/show-capabilities.txt; go test -run PrintVMCapabilities -update).
func TestPrintVMCapabilities(t *testing.T) {
	at := time.Date(2025, 3, 4, 10, 0, 0, 0, time.Local)
	vm := api.VM{ID: "vm-1", Name: "box", Owner: "ann", Profile: "render", State: "stopped", Hours: 8, CreatedAt: at, UpdatedAt: at,
		GPUs: []api.VMGPU{{Address: "0000:41:00.0", Kind: "vgpu", Type: "L40S-12Q"}},
		Capabilities: &api.VMCapabilities{
			DiskSnapshot:   api.Capability{Can: true, Reason: "quiesced (file systems frozen through the guest agent) when the agent answers, else crash-consistent"},
			MemorySnapshot: api.Capability{Reason: "QEMU 7.2 is older than 8.1, which VFIO migration needs"},
			Suspend:        api.Capability{Reason: "QEMU 7.2 is older than 8.1, which VFIO migration needs"},
			LiveMigration:  api.Capability{Reason: "QEMU 7.2 is older than 8.1, which VFIO migration needs"},
			Basis:          "libvirt 9.0.0, QEMU 7.2.0; NVIDIA driver: the simulated host's NVML reports vGPU migration support",
		}}
	var b strings.Builder
	if err := printVM(&b, vm, at); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "show-capabilities.txt")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run PrintVMCapabilities -update)", err)
	}
	if b.String() != string(want) {
		t.Errorf("gpuvm show:\n%s\nwant:\n%s", b.String(), want)
	}
	vm.Capabilities = nil
	b.Reset()
	if err := printVM(&b, vm, at); err != nil || strings.Contains(b.String(), "Can:") {
		t.Errorf("no capabilities, no section: %v\n%s", err, b.String())
	}
}

// gpuvm show's Home line says where the owner's home lives and whether the
// VM is there; a VM that mounts no home has none.
func TestPrintVMHome(t *testing.T) {
	for _, c := range []struct {
		name, host, home string
		away             bool
		want             string
	}{
		{"at home", "gpu-01", "gpu-01", false, "on gpu-01, this VM's host"},
		{"away", "gpu-02", "gpu-01", true, "on gpu-01, not here: this VM runs on gpu-02, so the home it mounts is another folder, on gpu-02, without the files of the home on gpu-01"},
		{"queued", "", "gpu-01", false, "on gpu-01"},
		{"no home", "gpu-02", "", false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			vm := api.VM{Name: "box", State: "running", Host: c.host, HomeHost: c.home, AwayFromHome: c.away}
			var b strings.Builder
			if err := printVM(&b, vm, time.Now()); err != nil {
				t.Fatal(err)
			}
			home := ""
			for _, line := range strings.Split(b.String(), "\n") {
				if rest, ok := strings.CutPrefix(line, "  Home:"); ok {
					home = strings.TrimSpace(rest)
				}
			}
			if home != c.want {
				t.Errorf("Home: %q, want %q:\n%s", home, c.want, b.String())
			}
		})
	}
}
