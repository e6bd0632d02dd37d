package main

import (
	"strings"
	"testing"
)

// The test seams refuse what they cannot honour, naming the variable: a
// disk directory is taken on libvirt's test driver only, never on a URI a
// production host uses.
func TestReadTestSeams(t *testing.T) {
	for _, c := range []struct {
		name, diskDir, uri, want string
	}{
		{"disk dir on the test driver", "/tmp/disks", "test:///default", ""},
		{"disk dir on a test file", "/tmp/disks", "test:///tmp/host.xml", ""},
		{"disk dir on the test driver through libvirtd", "/tmp/disks", "test+unix:///default", ""},
		{"no disk dir on qemu", "", "qemu:///system", ""},
		{"disk dir on qemu", "/tmp/disks", "qemu:///system", `$GPUVM_TEST_DISK_DIR is set, but the libvirt URI is "qemu:///system"`},
		{"disk dir on a remote qemu", "/tmp/disks", "qemu+ssh://gpu-01/system", `libvirt's test driver (test:///…, test+unix:///…) only`},
		{"disk dir on a test-looking path", "/tmp/disks", "qemu:///test://", `the libvirt URI is "qemu:///test://"`},
		{"disk dir on a driver named like test", "/tmp/disks", "testing:///default", `the libvirt URI is "testing:///default"`},
		{"disk dir on no URI", "/tmp/disks", "test", `the libvirt URI is "test"`},
		{"relative disk dir", "disks", "test:///default", `"disks": want an absolute directory`},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{envTestDiskDir: c.diskDir}
			s, err := readTestSeams(func(k string) string { return env[k] }, c.uri)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want == "" && s.diskDir != c.diskDir:
				t.Fatalf("disk dir %q, want %q", s.diskDir, c.diskDir)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}
