package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/store"
)

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
		return warnings
	}
	for _, w := range check(profiles()) {
		log.Warn("configuration warning", "warning", w)
	}
	if cfg != nil {
		cfg.check.Store(&check)
	}
	return m
}
