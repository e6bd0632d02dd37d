package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The tool makes its file, reads it for a second and says so in the
// key=value lines the benchmark parses; bad arguments are refused.
func TestRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rr")
	var out bytes.Buffer
	if err := run(&out, []string{file, "4", "1"}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Size() != 4<<20 {
		t.Fatalf("the file: %v %v", fi, err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	reads, _ := strconv.Atoi(got["reads"])
	iops, _ := strconv.ParseFloat(got["iops"], 64)
	if reads < 1 || iops <= 0 || (got["direct"] != "yes" && got["direct"] != "no") || got["p50_us"] == "" || got["p99_us"] == "" {
		t.Errorf("output %q", out.String())
	}
	for _, args := range [][]string{{file}, {file, "0", "1"}, {file, "4", "x"}} {
		if err := run(&out, args); err == nil {
			t.Errorf("run %q: no error", args)
		}
	}
}
