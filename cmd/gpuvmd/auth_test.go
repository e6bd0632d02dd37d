package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
)

func TestOpenDirectory(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if d, err := openDirectory(&config.Config{}, log); d != nil || err != nil {
		t.Errorf("no ldap block: %v, %v", d, err)
	}
	cfg := &config.Config{}
	cfg.Server.Auth.LDAP = &config.LDAP{URL: "ldap://127.0.0.1:1", BindDN: "cn=x", BindPasswordFile: filepath.Join(t.TempDir(), "gone")}
	if _, err := openDirectory(cfg, log); err == nil || !strings.Contains(err.Error(), "bind password") {
		t.Errorf("missing password file: %v", err)
	}
	var logged strings.Builder
	cfg.Server.Auth.LDAP = &config.LDAP{URL: "ldaps://127.0.0.1:1", InsecureSkipVerify: true}
	if d, err := openDirectory(cfg, slog.New(slog.NewTextHandler(&logged, nil))); d == nil || err != nil {
		t.Fatalf("insecure: %v", err)
	}
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "NOT verified") {
		t.Errorf("insecure_skip_verify is not warned about at start:\n%s", logged.String())
	}
}
