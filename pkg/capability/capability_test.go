package capability

import (
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

var (
	debian12 = HypervisorOf("QEMU", 9000000, 7002000)  // libvirt 9.0.0, QEMU 7.2.0 (this machine)
	modern   = HypervisorOf("QEMU", 10000000, 8002000) // libvirt 10.0.0, QEMU 8.2.0
	oldVirt  = HypervisorOf("QEMU", 8005000, 8002000)  // libvirt 8.5.0, QEMU 8.2.0
	floors   = HypervisorOf("QEMU", 8006000, 8001000)  // exactly libvirt 8.6.0, QEMU 8.1.0
	testDrv  = HypervisorOf("Test", 9000000, 2)        // test:///default
	unknown  = Hypervisor{Note: "libvirt did not answer"}

	migrates   = Driver{Answered: true, Migration: true}
	noMigrates = Driver{Answered: true}
	simYes     = Driver{Answered: true, Migration: true, Simulated: true}
	noNVML     = Driver{Note: "NVML unavailable: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"}
)

// want is one capability expected: can, and words its reason must hold.
type want struct {
	can  bool
	says string
}

func check(t *testing.T, name string, got Answer, w want) {
	t.Helper()
	if got.Can != w.can || !strings.Contains(got.Reason, w.says) {
		t.Errorf("%s = %v %q; want %v and a reason with %q", name, got.Can, got.Reason, w.can, w.says)
	}
	if got.Reason == "" {
		t.Errorf("%s has no reason", name)
	}
}

// The three capabilities that save device state, over GPU kinds × virtiofs
// × libvirt/QEMU versions × NVML's answers.
func TestSavedState(t *testing.T) {
	yes := func(says string) [3]want { return [3]want{{true, says}, {true, says}, {true, says}} }
	no := func(says string) [3]want { return [3]want{{false, says}, {false, says}, {false, says}} }
	for _, tc := range []struct {
		name     string
		gpu      gpu.Kind
		virtiofs bool
		hv       Hypervisor
		drv      Driver
		want     [3]want // memory snapshot, suspend, live migration
	}{
		{"no GPU", "", false, debian12, Driver{}, [3]want{
			{true, "memory is saved with its disk"}, {true, "resumed later"}, {true, "local disk is copied"}}},
		{"no GPU, test driver", "", false, testDrv, Driver{}, yes("no device blocks it")},
		{"no GPU, versions unknown", "", false, unknown, Driver{}, yes("no device blocks it")},
		{"no GPU, virtiofs", "", true, modern, Driver{}, [3]want{
			{false, "virtiofs filesystems rule out RAM snapshots"}, {false, "virtiofs filesystems rule out suspend"},
			{false, "virtiofs filesystems rule out live migration"}}},

		{"passthrough", gpu.KindPassthrough, false, modern, migrates, [3]want{
			{false, "a passthrough GPU's state cannot be saved, so RAM snapshots are impossible"},
			{false, "a passthrough GPU cannot be suspended"}, {false, "a passthrough GPU cannot be live-migrated"}}},
		{"passthrough, virtiofs", gpu.KindPassthrough, true, debian12, noNVML, no("passthrough GPU")},

		{"vGPU on Debian 12", gpu.KindVGPU, false, debian12, migrates, no("QEMU 7.2 is older than 8.1, which VFIO migration needs")},
		{"vGPU, old libvirt", gpu.KindVGPU, false, oldVirt, migrates, no("libvirt 8.5 is older than 8.6, which VFIO migration needs")},
		{"vGPU, test driver", gpu.KindVGPU, false, testDrv, migrates, no("test driver (test:///default), which reports its own version 0.0.2, not QEMU's")},
		{"vGPU, versions unknown", gpu.KindVGPU, false, unknown, migrates, no("versions of libvirt and QEMU are not known (libvirt did not answer)")},
		{"vGPU, no NVML", gpu.KindVGPU, false, modern, noNVML, no("not known (NVML unavailable")},
		{"vGPU, driver without migration", gpu.KindVGPU, false, modern, noMigrates, no("the NVIDIA driver does not support vGPU migration on this GPU (NVML)")},
		{"vGPU, all there", gpu.KindVGPU, false, modern, migrates, yes("libvirt 10.0 and QEMU 8.2 support VFIO migration, and the NVIDIA driver supports vGPU migration on this GPU (NVML)")},
		{"vGPU, at the floors", gpu.KindVGPU, false, floors, migrates, yes("libvirt 8.6 and QEMU 8.1 support VFIO migration")},
		{"vGPU, simulated host", gpu.KindVGPU, false, modern, simYes, yes("(the simulated host's NVML) (simulated host)")},
		{"vGPU, simulated host on Debian 12", gpu.KindVGPU, false, debian12, simYes, no("QEMU 7.2 is older than 8.1")},
		{"vGPU, virtiofs", gpu.KindVGPU, true, modern, migrates, no("virtiofs filesystems rule out")},

		{"MIG-backed vGPU", gpu.KindMIG, false, modern, migrates, yes("MIG-backed vGPU migration on this GPU (NVML); NVIDIA's support matrix must also list the board")},
		{"MIG-backed vGPU, driver without", gpu.KindMIG, false, modern, noMigrates, no("does not support MIG-backed vGPU migration")},
		{"MIG-backed vGPU on Debian 12", gpu.KindMIG, false, debian12, migrates, no("QEMU 7.2 is older than 8.1")},
		{"MIG-backed vGPU, virtiofs", gpu.KindMIG, true, modern, migrates, no("virtiofs filesystems rule out")},

		{"abstract need not placed", gpu.KindAny, false, modern, Driver{Note: "the VM holds no GPU yet"}, no("chosen only when the VM is placed")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Of(Input{Profile: "p", GPU: tc.gpu, DiskFormat: "qcow2", GuestAgent: true, Virtiofs: tc.virtiofs, Hypervisor: tc.hv, Driver: tc.drv})
			check(t, "memory snapshot", s.MemorySnapshot, tc.want[0])
			check(t, "suspend", s.Suspend, tc.want[1])
			check(t, "live migration", s.LiveMigration, tc.want[2])
			if s.LiveMigration.Can && tc.gpu != "" && !strings.Contains(s.LiveMigration.Reason, "same vGPU type and driver version") {
				t.Errorf("live migration of a vGPU does not say the other host's driver must match: %q", s.LiveMigration.Reason)
			}
			// A disk-only snapshot of qcow2 works whatever the GPU.
			check(t, "disk snapshot", s.DiskSnapshot, want{true, "quiesced"})
		})
	}
}

func TestDiskSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     Input
		expect want
	}{
		{"qcow2 with agent", Input{DiskFormat: "qcow2", GuestAgent: true, GPU: gpu.KindPassthrough},
			want{true, "quiesced (file systems frozen through the guest agent) when the agent answers, else crash-consistent"}},
		{"qcow2 without agent", Input{DiskFormat: "qcow2", GPU: gpu.KindVGPU}, want{true, "crash-consistent: the VM has no guest agent"}},
		{"virtiofs", Input{DiskFormat: "qcow2", GuestAgent: true, Virtiofs: true}, want{true, "files on virtiofs filesystems are not in it"}},
		{"data disks", Input{DiskFormat: "qcow2", DataDisks: true}, want{true, "the VM's data disks are not in it"}},
		{"raw", Input{DiskFormat: "raw"}, want{false, "the system disk is raw; disk snapshots need qcow2"}},
		{"no disk", Input{}, want{false, "the VM has no disk"}},
	} {
		t.Run(tc.name, func(t *testing.T) { check(t, "disk snapshot", Of(tc.in).DiskSnapshot, tc.expect) })
	}
}

// A VM whose profile was removed still gets an answer, never an empty one.
func TestProfileMissing(t *testing.T) {
	s := Of(Input{Profile: "gone", ProfileMissing: true, Hypervisor: debian12})
	for name, a := range map[string]Answer{"disk": s.DiskSnapshot, "memory": s.MemorySnapshot, "suspend": s.Suspend, "migration": s.LiveMigration} {
		check(t, name, a, want{false, "profile gone is no longer configured"})
	}
	if s.Basis != "libvirt 9.0.0, QEMU 7.2.0" {
		t.Errorf("basis %q", s.Basis)
	}
}

func TestBasis(t *testing.T) {
	for _, tc := range []struct {
		in   Input
		want string
	}{
		{Input{Hypervisor: debian12}, "libvirt 9.0.0, QEMU 7.2.0"},
		{Input{Hypervisor: testDrv}, "libvirt 9.0.0, the test driver (test:///default) 0.0.2 (not QEMU)"},
		{Input{Hypervisor: unknown}, "libvirt and QEMU versions not known (libvirt did not answer)"},
		{Input{Hypervisor: modern, GPU: gpu.KindVGPU, Driver: simYes}, "libvirt 10.0.0, QEMU 8.2.0; NVIDIA driver: the simulated host's NVML reports vGPU migration support"},
		{Input{Hypervisor: modern, GPU: gpu.KindMIG, Driver: noMigrates}, "libvirt 10.0.0, QEMU 8.2.0; NVIDIA driver: NVML reports no vGPU migration support"},
		{Input{Hypervisor: modern, GPU: gpu.KindVGPU, Driver: noNVML}, "libvirt 10.0.0, QEMU 8.2.0; NVIDIA driver: NVML unavailable"},
		{Input{Hypervisor: modern, GPU: gpu.KindPassthrough, Driver: noNVML}, "libvirt 10.0.0, QEMU 8.2.0"},
	} {
		if got := Of(tc.in).Basis; !strings.HasPrefix(got, tc.want) {
			t.Errorf("basis %q; want %q", got, tc.want)
		}
	}
}

func TestVersion(t *testing.T) {
	v := FromLibvirt(9000000)
	if v != (Version{9, 0, 0}) || v.String() != "9.0.0" || v.short() != "9.0" {
		t.Errorf("%+v %s", v, v)
	}
	if v := FromLibvirt(8001002); v != (Version{8, 1, 2}) || v.short() != "8.1.2" {
		t.Errorf("%+v", v)
	}
	if !(Version{7, 2, 0}).Less(MinQEMUVFIO) || MinQEMUVFIO.Less(MinQEMUVFIO) || (Version{10, 0, 0}).Less(MinQEMUVFIO) || !(Version{8, 0, 9}).Less(MinQEMUVFIO) {
		t.Error("Less")
	}
	if h := HypervisorOf("qemu", 9000000, 7002000); h.Driver != "QEMU" || !h.isQEMU() {
		t.Errorf("%+v", h)
	}
}

func TestNVMLFactsFor(t *testing.T) {
	f := NVMLFacts{Known: true, Migration: map[string]bool{"0000:41:00.0": true, "0000:42:00.0": false}}
	for _, tc := range []struct {
		addrs []string
		want  Driver
	}{
		{[]string{"0000:41:00.0"}, Driver{Answered: true, Migration: true}},
		{[]string{"0000:41:00.0", "0000:42:00.0"}, Driver{Answered: true}},
		{nil, Driver{Note: "the VM holds no GPU yet"}},
		{[]string{"0000:99:00.0"}, Driver{Note: "NVML does not list GPU 0000:99:00.0"}},
	} {
		if got := f.For(tc.addrs); got != tc.want {
			t.Errorf("For(%v) = %+v; want %+v", tc.addrs, got, tc.want)
		}
	}
	if got := (NVMLFacts{Note: "NVML disabled by configuration (--nvml none)"}).For([]string{"0000:41:00.0"}); got.Answered || got.Note != "NVML disabled by configuration (--nvml none)" {
		t.Errorf("%+v", got)
	}
}

// libvirt's test driver names itself "TEST" (hypervisor.Conn.Driver).
func TestTestDriverSpelling(t *testing.T) {
	h := HypervisorOf("TEST", 9000000, 2)
	if h.isQEMU() || h.String() != "libvirt 9.0.0, the test driver (test:///default) 0.0.2 (not QEMU)" {
		t.Errorf("%+v %s", h, h)
	}
}
