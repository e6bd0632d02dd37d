package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// availability checks that what profiles are made of is here (their disk
// images, kernels, initrds, templates): the API marks a profile that lacks
// one and refuses its VMs, the orchestrator fails them with words. Files
// are checked only where libvirt reads this machine's: not with its test
// driver, which reads none, nor with a remote libvirt.
func availability(st *store.Store, hv *hypervisor.Conn) *images.Availability {
	a := &images.Availability{Store: st}
	u, err := url.Parse(hv.URI())
	if err == nil && u.Host == "" && !strings.EqualFold(hv.Driver(), "test") {
		a.Stat = os.Stat
	}
	return a
}

// unavailableWarnings are the configuration warnings, "FILE:LINE: …", of
// the profiles a VM cannot be made of now, with the files that are missing
// (for the admin; people see the reason without them).
func unavailableWarnings(ctx context.Context, a *images.Availability, c *config.Config) []string {
	var out []string
	for _, p := range c.SortedProfiles() {
		ms, err := a.Check(ctx, c, p)
		if err != nil || len(ms) == 0 {
			continue
		}
		var files []string
		for _, m := range ms {
			if m.Path != "" {
				files = append(files, m.Path)
			}
		}
		at := fmt.Sprintf("%s:%d:%d", p.DeclRange.Filename, p.DeclRange.Start.Line, p.DeclRange.Start.Column)
		w := fmt.Sprintf("%s: warning: profile %q is unavailable, and its VMs are refused: %s", at, p.Name, images.Reason(ms))
		if len(files) > 0 {
			w += "; missing: " + strings.Join(files, ", ")
		}
		out = append(out, w)
	}
	return out
}

// openImages makes the stored images' manager (pkg/images): volumes of the
// storage pool of the configuration in force at start. It checks the image
// blocks that name imported images against the database now, and at every
// reload (liveConfig.check), as warnings with the block's file and line.
// Files uploaded to import wait in the state directory's uploads/.
func openImages(ctx context.Context, o options, cfg *liveConfig, st *store.Store, hv *hypervisor.Conn, orch *orchestrator.Orchestrator,
	profiles func() *config.Config, log *slog.Logger) *images.Manager {
	m := &images.Manager{Store: st, Volumes: hv, Pool: profiles().Server.Libvirt.StoragePool, DomainName: orch.DomainName, Log: log,
		Uploads: &images.Uploads{Dir: filepath.Join(o.stateDir, "uploads")}}
	check := func(c *config.Config) []string {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		warnings, err := images.CheckConfig(cctx, st, c)
		if err != nil {
			warnings = append(warnings, "warning: the image blocks naming imported images could not be checked: "+err.Error())
		}
		return append(warnings, unavailableWarnings(cctx, availability(st, hv), c)...)
	}
	for _, w := range check(profiles()) {
		log.Warn("configuration warning", "warning", w)
	}
	if cfg != nil {
		cfg.check.Store(&check)
	}
	return m
}
