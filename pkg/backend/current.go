package backend

import (
	"context"
	"fmt"
	"slices"
)

// Backends gives the running backends by name (a *loader.Loader).
type Backends interface {
	Names() []string
	Backend(name string) (Backend, bool)
}

// InventoryCache is what a Backends may offer besides (a *loader.Loader
// does): the backends' inventories as they last pushed them, with every
// Create and Remove that returned reflected, read without calling them;
// a backend that does not push (API v1) is asked.
type InventoryCache interface {
	// Inventories returns the inventory of each named backend that runs;
	// one that fails is reported and left out.
	Inventories(ctx context.Context, names []string) (map[string]Inventory, []error)
}

// CurrentInventories is the named backends' inventories as bs keeps them
// current (InventoryCache), without calling the backends that push them;
// from Inventories when bs keeps none.
func CurrentInventories(ctx context.Context, bs Backends, names []string) (map[string]Inventory, []error) {
	if c, ok := bs.(InventoryCache); ok {
		return c.Inventories(ctx, names)
	}
	return Inventories(ctx, bs, names)
}

// Inventories asks each named backend for its inventory, in name order; a
// backend that is not running or fails is reported and left out.
func Inventories(ctx context.Context, bs Backends, names []string) (map[string]Inventory, []error) {
	invs := map[string]Inventory{}
	var errs []error
	for _, name := range slices.Sorted(slices.Values(names)) {
		b, ok := bs.Backend(name)
		if !ok {
			continue
		}
		inv, err := b.Inventory(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("inventory of %s: %w", name, err))
			continue
		}
		invs[name] = inv
	}
	return invs, errs
}
