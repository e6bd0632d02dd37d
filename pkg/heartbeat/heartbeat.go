// Package heartbeat keeps a gpuvmd's row in the hosts table current: it
// registers the host at start-up and then writes its heartbeat, with the
// inventory, every interval. How old a heartbeat may be before its host is
// down is config.DefaultHeartbeatTimeout unless the node block says.
package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Beater registers a gpuvmd in the hosts table and keeps its heartbeat
// and inventory current.
type Beater struct {
	Store *store.Store
	// Inventory collects the host's inventory now.
	Inventory func(context.Context) gpu.HostInventory
	// Host is the host's name (the orchestrator's); APIURL where its API
	// answers; Version gpuvmd's version.
	Host, APIURL, Version string
	// Every is the heartbeat interval (default config.DefaultHeartbeatInterval).
	Every time.Duration
	// Publish, when set, makes what is stored of the inventory (JSON); it
	// must keep the gpu.HostInventory's fields (GET /v1/hosts reads them)
	// and may add others: a fleet's nodes add what the leader places by
	// (orchestrator.HeartbeatInventory). nil: the inventory as it is.
	Publish func(gpu.HostInventory) any
	Log     *slog.Logger
}

func (h *Beater) log() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log
}

func (h *Beater) inventory(ctx context.Context) (string, error) {
	hi := h.Inventory(ctx)
	var v any = hi
	if h.Publish != nil {
		v = h.Publish(hi)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode the inventory of %s: %w", h.Host, err)
	}
	return string(b), nil
}

// Register records that the host started, with its inventory now.
func (h *Beater) Register(ctx context.Context) error {
	inv, err := h.inventory(ctx)
	if err != nil {
		return err
	}
	row := &store.Host{Name: h.Host, APIURL: h.APIURL, Version: h.Version, Inventory: inv}
	if err := h.Store.RegisterHost(ctx, row); err != nil {
		return err
	}
	h.log().Info("host registered", "host", h.Host, "api_url", h.APIURL, "state", row.State)
	return nil
}

// Beat writes one heartbeat with the inventory now; a host whose row has
// gone (an admin removed it) registers again.
func (h *Beater) Beat(ctx context.Context) error {
	inv, err := h.inventory(ctx)
	if err != nil {
		return err
	}
	err = h.Store.Heartbeat(ctx, h.Host, inv)
	if errors.Is(err, store.ErrNotFound) {
		return h.Register(ctx)
	}
	return err
}

// Run beats every interval until ctx ends; failures are logged and the
// next beat tries again.
func (h *Beater) Run(ctx context.Context) {
	every := h.Every
	if every <= 0 {
		every = config.DefaultHeartbeatInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.Beat(ctx); err != nil && ctx.Err() == nil {
			h.log().Warn("heartbeat failed; trying again at the next one", "host", h.Host, "err", err)
		}
	}
}
