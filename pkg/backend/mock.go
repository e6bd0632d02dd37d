package backend

import "context"

// Mock is a Backend whose methods call its function fields; a nil field
// makes its method return zero values and no error.
type Mock struct {
	InfoF      func(ctx context.Context) (Info, error)
	ConfigureF func(ctx context.Context, cfg Config) error
	InventoryF func(ctx context.Context) (Inventory, error)
	CreateF    func(ctx context.Context, req CreateRequest) (Device, error)
	RemoveF    func(ctx context.Context, req RemoveRequest) error
	HealthF    func(ctx context.Context) (Health, error)
}

var _ Backend = (*Mock)(nil)

func (m *Mock) Info(ctx context.Context) (Info, error) {
	if m.InfoF == nil {
		return Info{}, nil
	}
	return m.InfoF(ctx)
}

func (m *Mock) Configure(ctx context.Context, cfg Config) error {
	if m.ConfigureF == nil {
		return nil
	}
	return m.ConfigureF(ctx, cfg)
}

func (m *Mock) Inventory(ctx context.Context) (Inventory, error) {
	if m.InventoryF == nil {
		return Inventory{}, nil
	}
	return m.InventoryF(ctx)
}

func (m *Mock) Create(ctx context.Context, req CreateRequest) (Device, error) {
	if m.CreateF == nil {
		return Device{}, nil
	}
	return m.CreateF(ctx, req)
}

func (m *Mock) Remove(ctx context.Context, req RemoveRequest) error {
	if m.RemoveF == nil {
		return nil
	}
	return m.RemoveF(ctx, req)
}

func (m *Mock) Health(ctx context.Context) (Health, error) {
	if m.HealthF == nil {
		return Health{}, nil
	}
	return m.HealthF(ctx)
}
