package config

import (
	"strings"
	"testing"
)

// checkBlock parses src as the file p.hcl and checks one table case of a
// server sub-block's test: with err "" the configuration parses and
// get(cfg) is want; else a diagnostic summarised err points into the file,
// at line (0: anywhere past the first line, inside the block).
func checkBlock[T comparable](t *testing.T, src, err string, line int, want T, get func(*Config) T) {
	t.Helper()
	cfg, diags := Parse(Source{Name: "p.hcl", Data: []byte(src)})
	if err == "" {
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		if got := get(cfg); got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
		return
	}
	var sums []string
	for _, d := range diags {
		sums = append(sums, d.Summary)
		if d.Summary != err {
			continue
		}
		switch {
		case d.Subject == nil || d.Subject.Filename != "p.hcl":
			t.Errorf("diagnostic %q points at %v, not into p.hcl", d.Summary, d.Subject)
		case line == 0 && d.Subject.Start.Line < 2, line != 0 && d.Subject.Start.Line != line:
			t.Errorf("diagnostic %q points at line %d, want %d (0: inside the block)", d.Summary, d.Subject.Start.Line, line)
		}
		return
	}
	t.Errorf("diagnostics %s; want %q", strings.Join(sums, "; "), err)
}
