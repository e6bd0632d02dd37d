package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestBackupBlock(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       *Backup
		err        string // a diagnostic's summary; "" for none
		line       int    // the line it points at (the server block starts at 1)
	}{
		{"no block", "", nil, "", 0},
		{"defaults", "backup {}", &Backup{Every: 24 * time.Hour, Keep: 7, Dir: "/srv/gpuvm/backups"}, "", 0},
		{"all set", "backup {\n every = \"6h\"\n keep = 28\n dir = \"/backups/gpu-03\"\n}",
			&Backup{Every: 6 * time.Hour, Keep: 28, Dir: "/backups/gpu-03"}, "", 0},
		{"days", "backup {\n every = \"1d\"\n}", &Backup{Every: 24 * time.Hour, Keep: 7, Dir: "/srv/gpuvm/backups"}, "", 0},
		{"bad duration", "backup {\n every = \"daily\"\n}", nil, "Invalid duration", 4},
		{"too often", "backup {\n every = \"1m\"\n}", nil, "Invalid every", 4},
		{"keep zero", "backup {\n keep = 0\n}", nil, "Invalid keep", 4},
		{"keep too many", "backup {\n every = \"1h\"\n keep = 5000\n}", nil, "Invalid keep", 5},
		{"empty dir", "backup {\n\n dir = \"\"\n}", nil, "Invalid dir", 5},
		{"unknown attribute", "backup {\n keep_days = 3\n}", nil, "Unsupported argument", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "server {\n state_dir = \"/srv/gpuvm\"\n" + tc.body + "\n}\n"
			cfg, diags := Parse(Source{Name: "server.hcl", Data: []byte(src)})
			if tc.err == "" {
				if diags.HasErrors() {
					t.Fatal(diags)
				}
				got := cfg.Server.Backup
				if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
					t.Errorf("backup = %+v, want %+v", got, tc.want)
				}
				return
			}
			var sums []string
			for _, d := range diags {
				sums = append(sums, d.Summary)
				if d.Summary != tc.err {
					continue
				}
				if d.Subject == nil || d.Subject.Filename != "server.hcl" || d.Subject.Start.Line != tc.line {
					t.Errorf("diagnostic %q points at %v, want server.hcl:%d", d.Summary, d.Subject, tc.line)
				}
				return
			}
			t.Errorf("diagnostics %s; want %q", strings.Join(sums, "; "), tc.err)
		})
	}
}

func TestBackupJSON(t *testing.T) {
	b, err := json.Marshal(Backup{Every: 6 * time.Hour, Keep: 3, Dir: "/b"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"keep":3,"dir":"/b","every":21600}`; got != want {
		t.Errorf("json = %s, want %s", got, want)
	}
}
