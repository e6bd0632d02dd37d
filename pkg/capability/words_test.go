package capability

import (
	"regexp"
	"testing"
	"unicode"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/i18n"
)

// Every reason and basis the rules can give is said in Chinese on a
// Chinese page: a sentence the word table does not match comes back in
// English, as it was.
func TestEveryReasonIsTranslated(t *testing.T) {
	hvs := []Hypervisor{
		{Known: true, Driver: "QEMU", Libvirt: Version{9, 0, 0}, QEMU: Version{7, 2, 0}},
		{Known: true, Driver: "QEMU", Libvirt: Version{10, 0, 0}, QEMU: Version{8, 2, 0}},
		{Known: true, Driver: "QEMU", Libvirt: Version{8, 0, 0}, QEMU: Version{8, 2, 0}},
		{Known: true, Driver: "Test", Libvirt: Version{9, 0, 0}, QEMU: Version{0, 0, 2}},
		{Note: "this server did not read its host's versions"},
		{Note: "the VM is on node n2, whose versions this server did not read"},
	}
	drivers := []Driver{
		{Answered: true, Migration: true},
		{Answered: true, Migration: false},
		{Answered: true, Migration: true, Simulated: true},
		{Answered: true, Migration: false, Simulated: true},
		{Note: "the VM holds no GPU yet"},
		{Note: "NVML does not list GPU 0000:41:00.0"},
		{Note: "NVML unavailable: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"},
		{Note: "this server did not read its host's versions"},
	}
	seen := map[string]bool{}
	check := func(in Input, what, s string) {
		if s == "" || seen[s] {
			return
		}
		seen[s] = true
		if versionsOnly.MatchString(s) {
			return // names and numbers: nothing to translate
		}
		if zh := i18n.Text(i18n.Chinese, s); zh == s || !hasHan(zh) {
			t.Errorf("%s of %+v is not translated: %q", what, in, s)
		}
	}
	for _, kind := range []gpu.Kind{"", gpu.KindVGPU, gpu.KindMIG, gpu.KindPassthrough, gpu.KindAny} {
		for _, disk := range []string{"", "qcow2", "raw"} {
			for _, agent := range []bool{false, true} {
				for _, fs := range []bool{false, true} {
					for _, h := range hvs {
						for _, d := range drivers {
							in := Input{Profile: "p", GPU: kind, DiskFormat: disk, GuestAgent: agent, Virtiofs: fs, Hypervisor: h, Driver: d}
							set := Of(in)
							for _, a := range []Answer{set.DiskSnapshot, set.MemorySnapshot, set.Suspend, set.LiveMigration} {
								check(in, "reason", a.Reason)
							}
							check(in, "basis", set.Basis)
						}
					}
				}
			}
		}
	}
	missing := Of(Input{Profile: "gone", ProfileMissing: true})
	check(Input{ProfileMissing: true}, "reason", missing.DiskSnapshot.Reason)
	check(Input{ProfileMissing: true}, "basis", missing.Basis)
	t.Logf("%d sentences checked", len(seen))
}

// versionsOnly is a basis of versions alone ("libvirt 9.0.0, QEMU 7.2.0").
var versionsOnly = regexp.MustCompile(`^libvirt [0-9.]+, QEMU [0-9.]+$`)

func hasHan(s string) bool {
	for _, r := range s {
		if unicode.Is(unicode.Han, r) {
			return true
		}
	}
	return false
}
