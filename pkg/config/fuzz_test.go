package config

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary text to parse + decode + validate + render, as the
// API will with profiles from anyone. It must never panic, and must return a
// Config exactly when there is no error.
func FuzzLoad(f *testing.F) {
	for _, pattern := range []string{"testdata/errors/*.hcl", "testdata/dirs/*/*.hcl", "../../configs/*/*.hcl"} {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			if data, err := os.ReadFile(p); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(`profile "p" { gpu { kind = "mig" profile = "1g.10gb" } boot { kernel = "/k" } }`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l := new(Loader)
		cfg, diags := l.Parse(Source{Name: "fuzz.hcl", Data: data})
		if diags.HasErrors() != (cfg == nil) {
			t.Fatalf("errors=%v but cfg=%v", diags.HasErrors(), cfg != nil)
		}
		if err := l.WriteDiagnostics(io.Discard, diags, 80); err != nil {
			t.Fatal(err)
		}
		if cfg != nil {
			for _, p := range cfg.Profiles {
				_, _ = cfg.RenderCloudInit(p, CloudInitInput{User: "u", SSHAuthorizedKeys: []string{"k"}})
			}
		}
	})
}
