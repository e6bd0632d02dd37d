package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteConfig(t *testing.T) {
	dir := t.TempDir()
	n := Node{Name: "n2", Heartbeat: time.Second, Timeout: 1500 * time.Millisecond, Profiles: "profile \"p\" {}\n"}
	if err := n.WriteConfig(dir); err != nil {
		t.Fatal(err)
	}
	server, err := os.ReadFile(filepath.Join(dir, "server.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`name               = "n2"`, `heartbeat_interval = "1s"`, `heartbeat_timeout  = "1500ms"`, `storage_pool = "gpuvm"`} {
		if !strings.Contains(string(server), want) {
			t.Errorf("server.hcl lacks %s:\n%s", want, server)
		}
	}
	if profiles, _ := os.ReadFile(filepath.Join(dir, "profiles.hcl")); string(profiles) != n.Profiles {
		t.Errorf("profiles.hcl is %q", profiles)
	}
	// No heartbeat given: gpuvmd's defaults, not a zero.
	if s := (Node{Name: "n1"}).ServerHCL(); strings.Contains(s, "heartbeat") {
		t.Errorf("a node without a heartbeat writes one:\n%s", s)
	}
	if err := (Node{}).WriteConfig(dir); err == nil || !strings.Contains(err.Error(), "name") {
		t.Errorf("a node without a name: %v", err)
	}
}

func TestDiff(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := Stats{At: t0, Xacts: 100, TupReturned: 1000, TupFetched: 50,
		Tables: map[string]TableStats{"hosts": {SeqScan: 10, SeqRead: 30}, "vms": {IdxScan: 5, IdxFetch: 5}}}
	b := Stats{At: t0.Add(10 * time.Second), Xacts: 301, TupReturned: 3000, TupFetched: 150,
		Tables: map[string]TableStats{"hosts": {SeqScan: 30, SeqRead: 90, Writes: 20}, "vms": {IdxScan: 105, IdxFetch: 1005},
			"idle": {SeqScan: 1}},
		Conns: map[string]int{"gpuvmd-pool/n1": 2}}
	l := Diff(a, b)
	if l.Xacts != 20 || l.RowsReturned != 200 || l.RowsFetched != 10 {
		t.Errorf("database: %+v", l)
	}
	if l.Scans != 12.1 || l.SeqScans != 2.1 || l.SeqRows != 6 || l.IdxRows != 100 || l.Writes != 2 {
		t.Errorf("tables together: %+v", l)
	}
	// Busiest (rows read) first; a table met only in b counts from zero.
	if len(l.Tables) != 3 || l.Tables[0].Name != "vms" || l.Tables[1].Name != "hosts" || l.Tables[2].Name != "idle" {
		t.Errorf("tables: %+v", l.Tables)
	}
	var out strings.Builder
	l.Print(&out, "", 2)
	if !strings.Contains(out.String(), "gpuvmd-pool/n1 2") || !strings.Contains(out.String(), "… 1 more tables") {
		t.Errorf("Print:\n%s", out.String())
	}
}

func TestWithApplication(t *testing.T) {
	got, err := WithApplication("postgres://u:p@127.0.0.1:5432/db?search_path=t_1", "gpuvmd-pool/n1")
	if err != nil || !strings.Contains(got, "application_name=gpuvmd-pool%2Fn1") || !strings.Contains(got, "search_path=t_1") {
		t.Errorf("URL: %q, %v", got, err)
	}
	if got, _ := WithApplication("host=x dbname=y", "a"); got != "host=x dbname=y application_name=a" {
		t.Errorf("key=value: %q", got)
	}
}

func TestWaits(t *testing.T) {
	ms := time.Millisecond
	samples := []WaitSample{
		{At: 0, Doing: []string{what("gpuvmd", "active", "", ""), what("gpuvmd", "active", "IO", "WALSync")}},
		{At: 20 * ms, Doing: []string{what("gpuvmd", "active", "IO", "WALSync"), what("gpuvmd", "idle in transaction", "Client", "ClientRead")}},
		{At: 40 * ms, Doing: nil},
		{At: 60 * ms, Doing: []string{what("checkpointer", "", "IO", "DataFileSync")}},
	}
	got, n := Waits(samples, 0, 60*ms)
	want := []WaitShare{{"gpuvmd IO:WALSync", 2.0 / 3}, {"gpuvmd idle in transaction", 1.0 / 3}, {"gpuvmd running", 1.0 / 3}}
	if n != 3 || len(got) != len(want) {
		t.Fatalf("Waits = %v over %d samples; want %v over 3", got, n, want)
	}
	for i := range want {
		if got[i].Doing != want[i].Doing || got[i].Mean-want[i].Mean > 1e-9 || want[i].Mean-got[i].Mean > 1e-9 {
			t.Fatalf("share %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if s := FormatWaits(got, 2); s != "0.67 gpuvmd IO:WALSync, 0.33 gpuvmd idle in transaction" {
		t.Errorf("FormatWaits = %q", s)
	}
	if got, n := Waits(samples, 50*ms, time.Second); n != 1 || FormatWaits(got, 3) != "1.00 checkpointer IO:DataFileSync" {
		t.Errorf("the last window: %v over %d", got, n)
	}
	if s := DescribeWaits(samples, 0, 60*ms, 1); s != "(3 samples) 0.67 gpuvmd IO:WALSync" {
		t.Errorf("DescribeWaits = %q", s)
	}
	if s := DescribeWaits(samples, time.Second, 2*time.Second, 1); s != "" {
		t.Errorf("DescribeWaits of no sample = %q", s)
	}
	if s := FormatWaits(nil, 3); s != "nothing busy" {
		t.Errorf("FormatWaits(nil) = %q", s)
	}
}

func TestStatementOf(t *testing.T) {
	for _, tc := range []struct{ query, want string }{
		{`INSERT INTO "audit_log" ("at","user") VALUES ($1,$2)`, "INSERT audit_log"},
		{`UPDATE "vms" SET "state"=$1 WHERE id = $2`, "UPDATE vms"},
		{`SELECT * FROM "vms" WHERE "vms"."id" = $1`, "SELECT vms"},
		{`SELECT events_horizon()`, "SELECT"},
		{`select pg_advisory_xact_lock($1)`, "SELECT"},
		{``, "?"},
	} {
		if got := statementOf(tc.query); got != tc.want {
			t.Errorf("statementOf(%q) = %q, want %q", tc.query, got, tc.want)
		}
	}
}
