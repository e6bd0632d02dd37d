package hypervisor

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDiskSnapshotFile: the stopped-VM mechanism on a real qcow2 overlay:
// data written, snapshot, data overwritten, revert, the data is back; the
// snapshot is listed, deleted, and a second delete finds nothing.
func TestDiskSnapshotFile(t *testing.T) {
	for _, bin := range []string{"qemu-img", "qemu-io"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed", bin)
		}
	}
	ctx := context.Background()
	dir := t.TempDir()
	base, overlay := filepath.Join(dir, "base.qcow2"), filepath.Join(dir, "vm.qcow2")
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	run("qemu-img", "create", "-q", "-f", "qcow2", base, "16M")
	run("qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", overlay)
	run("qemu-io", "-c", "write -P 0xab 0 64k", overlay)
	tag := "gpuvm-inst-snap1"
	if err := qemuImg(ctx, "snapshot", "-c", tag, overlay); err != nil {
		t.Fatal(err)
	}
	run("qemu-io", "-c", "write -P 0xcd 0 64k", overlay)
	if err := qemuImg(ctx, "snapshot", "-a", tag, overlay); err != nil {
		t.Fatal(err)
	}
	if out := run("qemu-io", "-c", "read -P 0xab 0 64k", overlay); strings.Contains(out, "Pattern verification failed") {
		t.Fatalf("after revert the data is not the snapshot's: %s", out)
	}
	tags, err := diskSnapshotTags(ctx, overlay)
	if err != nil || !slices.Equal(tags, []string{tag}) {
		t.Fatalf("tags = %v, %v", tags, err)
	}
	if err := qemuImg(ctx, "snapshot", "-d", tag, overlay); err != nil {
		t.Fatal(err)
	}
	if tags, err := diskSnapshotTags(ctx, overlay); err != nil || len(tags) != 0 {
		t.Fatalf("tags after delete = %v, %v", tags, err)
	}
	if err := qemuImg(ctx, "snapshot", "-a", "missing", overlay); err == nil || !strings.Contains(err.Error(), "qemu-img snapshot") {
		t.Fatalf("revert to a missing snapshot = %v", err)
	}
	raw := filepath.Join(dir, "raw.img")
	run("qemu-img", "create", "-q", "-f", "raw", raw, "1M")
	if _, err := diskSnapshotTags(ctx, raw); err == nil || !strings.Contains(err.Error(), "not qcow2") {
		t.Fatalf("raw disk = %v", err)
	}
}

// nodeFile reads the file of a qcow2 node as QEMU 7.2 names it under
// libvirt's -blockdev (query-named-block-nodes, seen on this machine).
func TestNodeFile(t *testing.T) {
	for in, want := range map[string]string{
		`json:{"backing": null, "driver": "qcow2", "file": {"driver": "file", "filename": "/var/lib/gpuvm/pool/vm.qcow2"}}`: "/var/lib/gpuvm/pool/vm.qcow2",
		"/var/lib/gpuvm/pool/vm.qcow2": "/var/lib/gpuvm/pool/vm.qcow2",
		"json:{not json":               "",
		`json:{"driver": "qcow2"}`:     "",
	} {
		if got := nodeFile(in); got != want {
			t.Errorf("nodeFile(%q) = %q, want %q", in, got, want)
		}
	}
}
