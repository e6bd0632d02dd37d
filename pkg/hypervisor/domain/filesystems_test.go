package domain

import (
	"strings"
	"testing"
)

func TestHasVirtiofs(t *testing.T) {
	for _, tc := range []struct {
		xml  string
		want bool
	}{
		{`<domain type="kvm"><name>a</name></domain>`, false},
		{`<domain type="kvm"><name>a</name><devices><disk type="file" device="disk"><target dev="vda"/></disk></devices></domain>`, false},
		{`<domain type="kvm"><name>a</name><devices><filesystem type="mount" accessmode="passthrough"><driver type="virtiofs"/>` +
			`<source dir="/home/ann"/><target dir="home"/></filesystem></devices></domain>`, true},
		{`<domain type="kvm"><name>a</name><devices><filesystem type="mount" accessmode="mapped"><driver type="path"/>` +
			`<source dir="/srv"/><target dir="srv"/></filesystem></devices></domain>`, false},
	} {
		got, err := HasVirtiofs(tc.xml)
		if err != nil || got != tc.want {
			t.Errorf("HasVirtiofs(%s) = %v, %v; want %v", tc.xml, got, err, tc.want)
		}
	}
	if _, err := HasVirtiofs("<domain"); err == nil {
		t.Error("broken XML parsed")
	}
}

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
