package gpu

import (
	"slices"
	"testing"
)

func TestModeOf(t *testing.T) {
	for _, c := range []struct {
		k    Kind
		want Mode
	}{
		{KindVGPU, ModeVGPU},
		{KindMIG, ModeMIG},
		{KindPassthrough, ModePassthrough},
		{KindAny, ""},
		{"", ""},
	} {
		if got := ModeOf(c.k); got != c.want {
			t.Errorf("ModeOf(%q) = %q, want %q", c.k, got, c.want)
		}
	}
}

func TestKindNamesRoundTrip(t *testing.T) {
	for _, names := range [][]string{nil, {}, {"mig", "vgpu"}, {"passthrough"}} {
		ks := Kinds(names)
		if (ks == nil) != (names == nil) || len(ks) != len(names) {
			t.Fatalf("Kinds(%#v) = %#v", names, ks)
		}
		if got := KindNames(ks); !slices.Equal(got, names) || (got == nil) != (names == nil) {
			t.Errorf("KindNames(Kinds(%#v)) = %#v", names, got)
		}
	}
	if Kinds([]string{"mig"})[0] != KindMIG {
		t.Error("Kinds does not give the named constants")
	}
}
