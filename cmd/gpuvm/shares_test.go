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
	if err := printShareList(&b, list, outputOpts{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "team") || !strings.Contains(lines[1], " rw ") ||
		!strings.Contains(lines[2], "no: share directory /srv/lab") || !strings.Contains(lines[2], "read_only: group:ml") {
		t.Errorf("table:\n%s", b.String())
	}
	// A quota: used and quota in their columns, and why it is not
	// enforced under the table.
	used, quota := uint64(7<<30), uint64(500<<30)
	list.Shares[0].UsedBytes, list.Shares[0].QuotaBytes = &used, &quota
	list.Shares[0].QuotaEnforcement, list.Shares[0].QuotaNote = "none", "the files of share team at /srv/team are on ext4 without project quotas"
	b.Reset()
	if err := printShareList(&b, list, outputOpts{}); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "USED  QUOTA") || !strings.Contains(lines[1], "7GiB  500GiB") ||
		lines[3] != "share team's quota is not enforced: the files of share team at /srv/team are on ext4 without project quotas" {
		t.Errorf("with a quota:\n%s", b.String())
	}
	b.Reset()
	if err := printShareList(&b, list, outputOpts{quiet: true}); err != nil || b.String() != "team\nlab\n" {
		t.Errorf("quiet: %q, %v", b.String(), err)
	}
	b.Reset()
	if err := printShareList(&b, &api.ShareList{}, outputOpts{}); err != nil || !strings.Contains(b.String(), "No shares") {
		t.Errorf("empty: %q, %v", b.String(), err)
	}
}

func TestPrintVMShares(t *testing.T) {
	var b bytes.Buffer
	printShares(&b, []api.VMShare{{Name: "team", Mode: "rw", Mount: "/gpuvm/shares/team"},
		{Name: "lab", Mode: "ro", Mount: "/data/lab", Enforcement: "host read-only bind mount"}, {Name: "gone"}})
	want := "  Shares:\tteam at /gpuvm/shares/team (read-write)\n" +
		"  \tlab at /data/lab (read-only, enforced: host read-only bind mount)\n" +
		"  \tgone at - (no longer the owner's to mount: the next start leaves it out)\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}
