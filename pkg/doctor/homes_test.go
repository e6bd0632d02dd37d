package doctor

import "testing"

func TestMemlockLimit(t *testing.T) {
	for _, tc := range []struct {
		limits    string
		n         uint64
		unlimited bool
	}{
		{"Max locked memory         unlimited            unlimited            bytes\n", 0, true},
		{"Max open files            1024                 524288               files\nMax locked memory         8388608              8388608              bytes\n", 8 << 20, false},
		{"", 0, false},
	} {
		if n, u := memlockLimit(tc.limits); n != tc.n || u != tc.unlimited {
			t.Errorf("memlockLimit(%q) = %d, %v; want %d, %v", tc.limits, n, u, tc.n, tc.unlimited)
		}
	}
	if uid := procUID("Name:\tlibvirtd\nUid:\t998\t998\t998\t998\n"); uid != "998" {
		t.Errorf("procUID = %q", uid)
	}
}
