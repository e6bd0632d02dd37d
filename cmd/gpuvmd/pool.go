package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
)

// poolTimeout bounds making the storage pool (libvirt defines, builds and
// starts it).
const poolTimeout = time.Minute

// poolKeeper makes the configured storage pool (server.libvirt.storage_pool)
// when libvirt lacks it: at start, and after a reload that names another
// pool or directory. A pool that exists is used as it is (see
// hypervisor.PreparePool).
type poolKeeper struct {
	hv  *hypervisor.Conn
	log *slog.Logger

	mu   sync.Mutex
	done config.Libvirt // the settings last prepared without error
}

// prepare makes l's pool usable unless it already made the same one. A
// failure is logged (it does not stop gpuvmd: VMs without a disk overlay
// or a seed need no pool) and returned.
func (k *poolKeeper) prepare(ctx context.Context, l config.Libvirt) error {
	if l.StoragePool == "" {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done.StoragePool == l.StoragePool && k.done.StoragePoolDir == l.StoragePoolDir {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, poolTimeout)
	defer cancel()
	made, err := k.hv.PreparePool(ctx, l.StoragePool, l.StoragePoolDir)
	if err != nil {
		k.log.Error("could not make the storage pool: VMs with a disk overlay or a cloud-init seed fail until it exists (gpuvm admin doctor checks it)",
			"pool", l.StoragePool, "dir", l.StoragePoolDir, "err", err)
		return err
	}
	k.done = l
	if made {
		k.log.Info("created the storage pool", "pool", l.StoragePool, "dir", l.StoragePoolDir)
		return nil
	}
	if st, err := k.hv.PoolInfo(ctx, l.StoragePool); err == nil && st.Dir != l.StoragePoolDir {
		k.log.Info("the storage pool exists elsewhere than storage_pool_dir; it is used where it is",
			"pool", l.StoragePool, "dir", st.Dir, "storage_pool_dir", l.StoragePoolDir)
	}
	return nil
}

// keepPool prepares the configuration's pool now and after every reload
// of cfg (nil: no configuration, no pool to make) until ctx ends.
func keepPool(ctx context.Context, k *poolKeeper, cfg *liveConfig) {
	if cfg == nil {
		return
	}
	_ = k.prepare(ctx, cfg.Load().Server.Libvirt)
	after := func(c *config.Config) {
		if ctx.Err() == nil {
			_ = k.prepare(ctx, c.Server.Libvirt)
		}
	}
	cfg.reloaded.Store(&after)
}
