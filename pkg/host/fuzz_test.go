package host

import (
	"strings"
	"testing"
)

// Parsers of kernel-written text must never panic, whatever the file holds.
func FuzzParseCreatableVGPUTypes(f *testing.F) {
	for _, s := range []string{
		"ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n1146  : NVIDIA L40S-2B\n",
		"ID    : vGPU Name\n",
		"",
		"1145 : NVIDIA L40S-1B",
		"ID : x\n-1 : y\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		types, err := ParseCreatableVGPUTypes(s)
		if err != nil {
			return
		}
		for _, ty := range types {
			if ty.ID <= 0 || strings.TrimSpace(ty.RawName) == "" {
				t.Fatalf("accepted a bad entry %+v from %q", ty, s)
			}
		}
	})
}

func FuzzParseMdevDescription(f *testing.F) {
	for _, s := range []string{
		"num_heads=4, frl_config=60, framebuffer=8192M, max_resolution=7680x4320, max_instance=6",
		"framebuffer=1G",
		"framebuffer=",
		"",
		"max_instance=-1, framebuffer=99999999999999999999M",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mem, max, err := ParseMdevDescription(s)
		if err == nil && (mem == 0 || max < 0) {
			t.Fatalf("accepted %q as %d bytes, max %d", s, mem, max)
		}
	})
}
