package doctor

import (
	"errors"
	"io/fs"
	"testing"
)

// The storage pool: where it is and whether QEMU reaches it; a missing one
// is gpuvmd's to make, at storage_pool_dir, and the finding says where.
func TestDoctorPool(t *testing.T) {
	const info = "virsh -c qemu:///system pool-info --bytes gpuvm"
	tests := []struct {
		name    string
		breakIt func(h *fakeHost)
		want    Severity
		seen    []string
	}{
		{"present", func(*fakeHost) {}, OK, []string{"running at /var/lib/libvirt/images/gpuvm", "838.4 GiB free"}},
		{"missing", func(h *fakeHost) {
			h.failing[info] = errPoolMissing
			delete(h.stats, "/var/lib/libvirt/images/gpuvm")
		}, Warning, []string{"no storage pool gpuvm: gpuvmd creates it when it starts, at /var/lib/libvirt/images/gpuvm"}},
		{"missing, its directory out of QEMU's reach", func(h *fakeHost) {
			h.failing[info] = errPoolMissing
			h.stats["/var/lib/libvirt"] = fs.ModeDir | 0o750
		}, Error, []string{"at /var/lib/libvirt/images/gpuvm", "QEMU (user libvirt-qemu) cannot reach: /var/lib/libvirt is 0750"}},
		{"libvirt refuses to say", func(h *fakeHost) {
			h.failing[info] = errors.New("exit status 1: error: access denied")
		}, Error, []string{"libvirt did not say whether pool gpuvm exists: exit status 1: error: access denied"}},
		{"present, out of QEMU's reach", func(h *fakeHost) {
			h.stats["/var/lib/libvirt/images/gpuvm"] = fs.ModeDir | 0o700
		}, Error, []string{"running at /var/lib/libvirt/images/gpuvm", "/var/lib/libvirt/images/gpuvm is 0700"}},
		{"present, its directory unknown", func(h *fakeHost) {
			delete(h.commands, "virsh -c qemu:///system pool-dumpxml gpuvm")
		}, Warning, []string{"its directory is unknown"}},
		{"inactive", func(h *fakeHost) {
			h.commands[info] = "Name: gpuvm\nState: inactive\n"
		}, Error, []string{"pool gpuvm is inactive"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := healthyFake()
			tc.breakIt(h)
			wantFinding(t, findingOf(t, h, "storage-pool", nil), tc.want, tc.seen...)
		})
	}
}
