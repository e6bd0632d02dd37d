package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// seedCLIUsage gives ann (group render) a whole GPU for 4 hours on
// 2026-01-10 at 25% and admin a 3/7 MIG slice for 7 hours without samples.
func seedCLIUsage(t *testing.T, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	at := func(h int) time.Time { return time.Date(2026, 1, 10, h, 0, 0, 0, time.UTC) }
	for _, h := range []struct {
		owner, group, name string
		share              float64
		from, to           int
		util               float64
	}{{"ann", "render", "cube", 1, 8, 12, 0.25}, {"admin", "", "big", 3.0 / 7, 9, 16, -1}} {
		vm := &store.VM{Name: h.name, Owner: h.owner, Group: h.group, Profile: "seat", Hours: 8}
		if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: h.owner}); err != nil {
			t.Fatal(err)
		}
		end := at(h.to)
		r := &store.UsageRecord{VMID: vm.ID, User: h.owner, Group: h.group, Host: "h1", GPUAddress: "0000:41:00.0", Kind: gpu.KindMIG,
			Share: h.share, StartedAt: at(h.from), EndedAt: &end}
		if err := st.InsertUsageRecord(ctx, r); err != nil {
			t.Fatal(err)
		}
		if h.util < 0 {
			continue
		}
		var rows []store.GPUSample
		for ts := at(h.from); ts.Before(end); ts = ts.Add(5 * time.Minute) {
			rows = append(rows, store.GPUSample{Host: "h1", GPUAddress: "0000:41:00.0", VMID: vm.ID, User: h.owner, TakenAt: ts,
				Resolution: 300, SampleCount: 30, GPUUtil: h.util, MemUtil: -1, EncUtil: -1, DecUtil: -1, Temperature: -1, PowerWatts: -1})
		}
		if err := st.InsertSamples(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
}

func TestUsageCommand(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	seedCLIUsage(t, env.Store)
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken, "TZ": "UTC"})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	day := []string{"--from", "2026-01-10T00:00:00Z", "--to", "2026-01-11T00:00:00Z"}

	out := ann.must(append([]string{"usage"}, day...)...)
	if !strings.HasPrefix(out, "USER  GPU-HOURS  USED  UTIL  VMS\nann        4.00  1.00   25%    1\n") ||
		!strings.Contains(out, ", ann's VMs.") || !strings.Contains(out, "Held but idle: 3.00 GPU-hours.") {
		t.Errorf("ann's usage:\n%s", out)
	}
	out = admin.must(append([]string{"usage", "--by", "group"}, day...)...)
	want := "GROUP   GPU-HOURS  USED  UTIL  VMS\n" +
		"render       4.00  1.00   25%    1\n" +
		"-            3.00     -     -    1\n" +
		"total        7.00  1.00   25%    2\n"
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "USED counts the 4.00 GPU-hours with utilisation samples; 3.00 had none.") {
		t.Errorf("by group:\n%s\nwant it to start with\n%s", out, want)
	}
	out = admin.must(append([]string{"usage", "--csv"}, day...)...)
	if out != "user,gpu_hours,measured_gpu_hours,used_gpu_hours,idle_gpu_hours,utilization,vms,running\n"+
		"ann,4,4,1,3,0.25,1,0\nadmin,3,0,0,0,,1,0\n" {
		t.Errorf("csv:\n%s", out)
	}
	var r api.UsageReport
	decodeStrict(t, admin.must(append([]string{"usage", "--json", "--user", "ann"}, day...)...), &r)
	if r.User != "ann" || len(r.Rows) != 1 || r.Rows[0].GPUHours != 4 || r.Total.Utilization == nil {
		t.Errorf("--json --user ann: %+v", r)
	}
	if out := ann.must("usage", "--from", "2025-01-01", "--to", "2025-01-02"); !strings.HasPrefix(out, "No GPU time held from ") {
		t.Errorf("an empty range: %q", out)
	}

	for _, c := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"another user's", []string{"usage", "--user", "admin"}, 1, "users see their own usage only"},
		{"csv and json", []string{"usage", "--csv", "--json"}, 2, "exclude each other"},
		{"by colour", []string{"usage", "--by", "colour"}, 2, `--by "colour"`},
		{"a bad time", []string{"usage", "--from", "last tuesday"}, 2, `--from "last tuesday"`},
		{"backwards", []string{"usage", "--from", "2026-01-02", "--to", "2026-01-01"}, 2, "is not after"},
		{"too long for the server", []string{"usage", "--from", "2020-01-01T00:00:00Z", "--to", "2026-01-01T00:00:00Z"}, 1, "longer than 400 days"},
	} {
		if _, errOut, code := ann.run(c.args...); code != c.code || !strings.Contains(errOut, c.err) {
			t.Errorf("%s: exit %d %q, want %d and %q", c.name, code, errOut, c.code, c.err)
		}
	}
}

func TestReportCommand(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	seedCLIUsage(t, env.Store)
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	path := filepath.Join(t.TempDir(), "review.html")
	out := admin.must("report", "--from", "2026-01-10T00:00:00Z", "--to", "2026-01-11T00:00:00Z", "--tz", "Asia/Kolkata",
		"--out", path, "--title", "Lab review", "--idle-below", "0.3")
	if !strings.HasPrefix(out, "Wrote "+path+" (") || !strings.HasSuffix(out, ", 2 users.\n") {
		t.Errorf("report: %q", out)
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<!DOCTYPE html>", "<h1>Lab review</h1>", "Asia/Kolkata", "ann/cube", "<td>render</td>", "under 30% utilisation"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".review.html-*")); len(matches) != 0 {
		t.Errorf("temporary files left: %v", matches)
	}
	if out := admin.must("report", "--from", "2026-01-10T00:00:00Z", "--to", "2026-01-11T00:00:00Z", "--tz", "UTC", "-o", "-"); !strings.HasPrefix(out, "<!DOCTYPE html>") {
		t.Errorf("--out -: %.80q", out)
	}
	for _, c := range []struct {
		name string
		cli  *cli
		args []string
		code int
		err  string
	}{
		{"a user", ann, []string{"report", "--out", filepath.Join(t.TempDir(), "x.html")}, 1, "this needs an admin"},
		{"a zone that is not", admin, []string{"report", "--tz", "Mars/Olympus"}, 2, "IANA time zone"},
		{"idle above 1", admin, []string{"report", "--idle-below", "3"}, 2, "between 0 and 1"},
		{"no file name", admin, []string{"report", "--out", ""}, 2, "--out"},
		{"a directory that is not", admin, []string{"report", "--tz", "UTC", "--out", filepath.Join(t.TempDir(), "no", "r.html")}, 1, "write the report"},
	} {
		if _, errOut, code := c.cli.run(c.args...); code != c.code || !strings.Contains(errOut, c.err) {
			t.Errorf("%s: exit %d %q, want %d and %q", c.name, code, errOut, c.code, c.err)
		}
	}
}

func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	local := func(y int, m time.Month, d, h, min int) time.Time {
		return time.Date(y, m, d, h, min, 0, 0, time.Local)
	}
	for _, c := range []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{"", time.Time{}, false},
		{"now", now, false},
		{"2026-03-01T06:30:00Z", time.Date(2026, 3, 1, 6, 30, 0, 0, time.UTC), false},
		{"2026-03-01T06:30:00+02:00", time.Date(2026, 3, 1, 4, 30, 0, 0, time.UTC), false},
		{"2026-03-01", local(2026, 3, 1, 0, 0), false},
		{"2026-03-01 18:15", local(2026, 3, 1, 18, 15), false},
		{"36h", now.Add(-36 * time.Hour), false},
		{"7d", now.Add(-7 * 24 * time.Hour), false},
		{"2w", now.Add(-14 * 24 * time.Hour), false},
		{"1.5d", now.Add(-36 * time.Hour), false},
		{"-3h", time.Time{}, true},
		{"0d", time.Time{}, true},
		{"yesterday", time.Time{}, true},
		{"2026-13-01", time.Time{}, true},
	} {
		got, err := parseWhen("--from", c.in, now)
		var ue usageError
		switch {
		case c.bad && !errors.As(err, &ue):
			t.Errorf("%q: %v, want a usage error", c.in, err)
		case !c.bad && (err != nil || !got.Equal(c.want)):
			t.Errorf("%q: %s, %v; want %s", c.in, got, err, c.want)
		}
	}
}

func TestLocalZone(t *testing.T) {
	link := func(target string, err error) func(string) (string, error) {
		return func(string) (string, error) { return target, err }
	}
	env := func(tz string) func(string) string {
		return func(k string) string {
			if k == "TZ" {
				return tz
			}
			return ""
		}
	}
	noLink := errors.New("not a link")
	for _, c := range []struct {
		name, tz string
		link     func(string) (string, error)
		want     string
	}{
		{"TZ", "Europe/Berlin", link("", noLink), "Europe/Berlin"},
		{"TZ with a colon", ":Asia/Tokyo", link("", noLink), "Asia/Tokyo"},
		{"TZ a file: the link", "/etc/localtime", link("/usr/share/zoneinfo/America/New_York", nil), "America/New_York"},
		{"a bad TZ: the link", "Nowhere/Land", link("../usr/share/zoneinfo/UTC", nil), "UTC"},
		{"the link", "", link("/var/db/timezone/zoneinfo/Europe/Paris", nil), "Europe/Paris"},
		{"a link outside zoneinfo", "", link("/etc/mytime", nil), ""},
		{"nothing", "", link("", noLink), ""},
	} {
		if got := localZone(env(c.tz), c.link); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
