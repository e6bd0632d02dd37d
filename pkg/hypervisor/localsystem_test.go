package hypervisor

import "testing"

func TestLocalSystem(t *testing.T) {
	for uri, want := range map[string]bool{
		"qemu:///system":              true,
		"qemu:///session":             false,
		"qemu+ssh://gpu02/system":     false,
		"test:///default":             false,
		"qemu://gpu02/system":         false,
		"not a URI\x00":               false,
		"qemu:///system?socket=/x.so": true,
	} {
		if got := (&Conn{uri: uri}).LocalSystem(); got != want {
			t.Errorf("%q: %v, want %v", uri, got, want)
		}
	}
}
