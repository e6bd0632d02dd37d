package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// gpuvm volume ls shows what each volume uses and its quota: a home's as
// last measured (with why its quota is not enforced), a data disk's size.
func TestPrintVolumesUsedAndQuota(t *testing.T) {
	u := func(n uint64) *uint64 { return &n }
	list := &api.VolumeList{Volumes: []api.Volume{
		{Name: "home", Kind: api.VolumeHome, State: api.VolumeReady, UsedBytes: u(3 << 30), QuotaBytes: u(10 << 30), Enforcement: "none",
			Note: "the homes' filesystem has no project quotas"},
		{ID: "vol-1", Name: "scratch", Kind: api.VolumeDisk, SizeBytes: 20 << 30, State: api.VolumeReady, UsedBytes: u(20 << 30), AttachedVMName: "box"},
	}, QuotaBytes: u(100 << 30), UsedBytes: 20 << 30, Rule: "defaults"}
	var buf bytes.Buffer
	if err := printVolumes(&buf, list, outputOpts{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	for i, want := range [][]string{
		{"NAME", "KIND", "SIZE", "USED", "QUOTA", "STATE"},
		{"home", "-", "3GiB", "10GiB", "ready"},
		{"scratch", "20GiB", "20GiB", "-", "box", "vol-1"},
		{"your home's quota is not enforced: the homes' filesystem has no project quotas"},
		{"20GiB of 100GiB used (defaults)"},
	} {
		for _, w := range want {
			if i >= len(lines) || !strings.Contains(lines[i], w) {
				t.Errorf("line %d lacks %q:\n%s", i, w, buf.String())
			}
		}
	}
	// A home not measured yet: no figures, not "0".
	list.Volumes[0].UsedBytes, list.Volumes[0].QuotaBytes, list.Volumes[0].Enforcement = nil, nil, ""
	buf.Reset()
	if err := printVolumes(&buf, list, outputOpts{}); err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(strings.Split(buf.String(), "\n")[1]); len(f) < 5 || f[3] != "-" || f[4] != "-" {
		t.Errorf("an unmeasured home: %q", f)
	}
}
