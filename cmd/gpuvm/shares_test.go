package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
)

func TestPrintShares(t *testing.T) {
	list := &api.ShareList{Shares: []api.Share{
		{Name: "team", Mode: "rw", Mount: "/gpuvm/shares/team", Available: true, Rule: "read_write: user:ann", Description: "the team's data"},
		{Name: "lab", Mode: "ro", Mount: "/data/lab", Unavailable: "share directory /srv/lab: no such file or directory", Rule: "read_only: group:ml"},
	}}
	var b bytes.Buffer
	if err := printShares(&b, list, outputOpts{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "team") || !strings.Contains(lines[1], " rw ") ||
		!strings.Contains(lines[2], "no: share directory /srv/lab") || !strings.Contains(lines[2], "read_only: group:ml") {
		t.Errorf("table:\n%s", b.String())
	}
	b.Reset()
	if err := printShares(&b, list, outputOpts{quiet: true}); err != nil || b.String() != "team\nlab\n" {
		t.Errorf("quiet: %q, %v", b.String(), err)
	}
	b.Reset()
	if err := printShares(&b, &api.ShareList{}, outputOpts{}); err != nil || !strings.Contains(b.String(), "No shares") {
		t.Errorf("empty: %q, %v", b.String(), err)
	}
}
