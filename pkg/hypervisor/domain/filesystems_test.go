package domain

import (
	"strings"
	"testing"
)

func TestFilesystemProblems(t *testing.T) {
	base := goldenSpecs()["linux-home"]
	for _, tc := range []struct {
		name string
		fss  []Filesystem
		want string // in the error; "" for none
	}{
		{"good", base.Filesystems, ""},
		{"relative source", []Filesystem{{Source: "homes/ci", Tag: "gpuvm-home"}}, "filesystem 1 source"},
		{"unclean source", []Filesystem{{Source: "/homes/../ci", Tag: "gpuvm-home"}}, "filesystem 1 source"},
		{"empty tag", []Filesystem{{Source: "/h"}}, "filesystem 1 tag"},
		{"long tag", []Filesystem{{Source: "/h", Tag: "a-tag-that-is-longer-than-thirty-six-bytes"}}, "filesystem 1 tag"},
		{"tag with space", []Filesystem{{Source: "/h", Tag: "my home"}}, "filesystem 1 tag"},
		{"same tag", []Filesystem{{Source: "/h", Tag: "t"}, {Source: "/g", Tag: "t"}}, "filesystem 2 tag"},
		{"relative binary", []Filesystem{{Source: "/h", Tag: "t", Binary: "virtiofsd"}}, "filesystem 1 binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			s.Filesystems = tc.fss
			err := Validate(s)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
	// No filesystem, no shared memory.
	d, err := Build(goldenSpecs()["linux-tiny"])
	if err != nil || d.MemoryBacking != nil {
		t.Fatalf("domain without filesystems: memory backing %+v, %v", d.MemoryBacking, err)
	}
}
