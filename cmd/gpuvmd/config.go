package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/hcl/v2"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
)

// liveConfig holds the configuration in force; a reload replaces it whole or not
// at all.
type liveConfig struct {
	dir string
	atomic.Pointer[config.Config]
	// sighup, when set, is told of each reload on SIGHUP and its outcome
	// (the audit log records it).
	sighup atomic.Pointer[func(err error, diagnostics string)]
	// check, when set, adds warnings that need the database (an image
	// block naming an imported image that is not stored) to each reload's.
	check atomic.Pointer[func(*config.Config) []string]
	// reloaded, when set, is called with each configuration a reload puts
	// in force (the storage pool is made: pool.go).
	reloaded atomic.Pointer[func(*config.Config)]
}

// loadConfig loads dir and refuses it if it has errors, printing every
// diagnostic (warnings too) to w.
func loadConfig(dir string, w io.Writer) (*liveConfig, error) {
	c := &liveConfig{dir: dir}
	if err := c.reload(w); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *liveConfig) reload(w io.Writer) error {
	_, err := c.reloadDiags(w)
	return err
}

// reloadDiags is reload that also returns the diagnostics.
func (c *liveConfig) reloadDiags(w io.Writer) (hcl.Diagnostics, error) {
	l := new(config.Loader)
	next, diags := l.LoadDir(c.dir)
	if len(diags) > 0 {
		_ = l.WriteDiagnostics(w, diags, 100)
	}
	if diags.HasErrors() {
		return diags, fmt.Errorf("configuration %s has errors; nothing was changed", c.dir)
	}
	c.Store(next)
	if check := c.check.Load(); check != nil {
		for _, w2 := range (*check)(next) {
			fmt.Fprintln(w, w2)
		}
	}
	if after := c.reloaded.Load(); after != nil {
		(*after)(next)
	}
	return diags, nil
}

// Reload implements server.Config.
func (c *liveConfig) Reload() (string, error) {
	var diag bytes.Buffer
	err := c.reload(&diag)
	return strings.TrimSpace(diag.String()), err
}

// ReloadDiagnosed implements server.DiagnosedConfig: Reload, with each
// diagnostic at its file, line and column.
func (c *liveConfig) ReloadDiagnosed() (string, []api.ConfigDiagnostic, error) {
	var diag bytes.Buffer
	diags, err := c.reloadDiags(&diag)
	return strings.TrimSpace(diag.String()), listDiagnostics(diags), err
}

// listDiagnostics writes HCL's diagnostics as the API lists them.
func listDiagnostics(diags hcl.Diagnostics) []api.ConfigDiagnostic {
	var out []api.ConfigDiagnostic
	for _, d := range diags {
		cd := api.ConfigDiagnostic{Severity: "error", Summary: d.Summary, Detail: d.Detail}
		if d.Severity == hcl.DiagWarning {
			cd.Severity = "warning"
		}
		if d.Subject != nil {
			cd.File, cd.Line, cd.Column = d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column
		}
		out = append(out, cd)
	}
	return out
}

// reloadOnSIGHUP reloads the configuration on SIGHUP until ctx ends. A
// broken set is rejected with its diagnostics and the old one stays in force.
func (c *liveConfig) reloadOnSIGHUP(ctx context.Context, log *slog.Logger) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-ch:
				var diag bytes.Buffer
				err := c.reload(&diag)
				if hook := c.sighup.Load(); hook != nil {
					(*hook)(err, strings.TrimSpace(diag.String()))
				}
				if err != nil {
					log.Error("configuration reload refused; the old configuration stays in force", "dir", c.dir, "err", err, "diagnostics", strings.TrimSpace(diag.String()))
					continue
				}
				cur := c.Load()
				log.Info("configuration reloaded", "dir", c.dir, "files", len(cur.Files), "profiles", len(cur.Profiles), "warnings", strings.TrimSpace(diag.String()))
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}

// fromConfig fills the options the command line did not set from the
// server block. Settings that need a restart (listen, state, backends) are
// read once at start.
func (o *options) fromConfig(s config.Server, set map[string]bool) {
	pick := func(flagName string, dst *string, v string) {
		if !set[flagName] && v != "" {
			*dst = v
		}
	}
	pick("listen", &o.listen, s.Listen)
	pick("state-dir", &o.stateDir, s.StateDir)
	pick("simulate", &o.simulate, s.Host.Simulate)
	pick("plugin-dir", &o.pluginDir, s.Plugins.Dir)
	pick("libvirt-uri", &o.libvirtURI, s.Libvirt.URI)
	o.db = profileDB{driver: s.Database.Driver, path: s.Database.Path, dsn: s.Database.DSN}
	if set["state-dir"] && o.db.driver != "postgres" {
		// --state-dir moves everything, the SQLite database included.
		o.db.path = ""
	}
	if !set["backends"] && len(s.Plugins.Backends) > 0 {
		o.backends = strings.Join(s.Plugins.Backends, ",")
	}
}
