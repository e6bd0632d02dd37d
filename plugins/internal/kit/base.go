package kit

import (
	"context"
	"log/slog"

	"github.com/gpuvm/gpuvm/pkg/backend"
)

// Base is what the backend binaries share: their identity, the Env that
// Configure opens, and a logger. A backend embeds it and adds Inventory,
// Create, Remove and Health.
type Base struct {
	name, version, description string
	State                      State
	Log                        *slog.Logger
}

// NewBase returns the Base of a backend.
func NewBase(name, version, description string) Base {
	return Base{name: name, version: version, description: description, Log: backend.PluginLogger()}
}

// Info implements backend.Backend.
func (b *Base) Info(context.Context) (backend.Info, error) {
	return backend.Info{Name: b.name, Version: b.version, APIVersions: backend.APIVersions, Description: b.description}, nil
}

// Configure implements backend.Backend: it opens the host the Config names.
func (b *Base) Configure(_ context.Context, cfg backend.Config) error {
	env, err := Open(b.name, cfg)
	if err != nil {
		return err
	}
	b.State.Set(env)
	b.Log.Info("configured", "host", env.SysFS.Describe(), "simulated", env.Simulated, "nvml", env.NVML != nil)
	return nil
}

// HostGeneration implements backend.HostGenerations.
func (b *Base) HostGeneration() string { return b.State.HostGeneration() }
