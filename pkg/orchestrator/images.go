package orchestrator

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// imageStore is the part of the store an image block naming an imported
// image needs (store.Store has it; a store without it cannot create such
// VMs).
type imageStore interface {
	GetImage(ctx context.Context, name string, version int) (*store.Image, error)
	RecordImageUse(ctx context.Context, vmID string, imageID int64) error
}

// importedImage is an image block naming an imported image, with the path
// and format of the version it resolves to now (pinned, or the newest),
// which it records as the VM's: that version is not deleted while the VM
// lives. A delete racing the create makes the record fail, and the create
// with it, rather than leave the VM on a missing base.
func (lc *lifecycle) importedImage(ctx context.Context, vmID string, img *config.Image) (*config.Image, error) {
	is, ok := lc.st.(imageStore)
	if !ok {
		return nil, errors.New("this store keeps no imported images")
	}
	rec, err := images.Resolve(ctx, is, img)
	if err != nil {
		return nil, err
	}
	if err := is.RecordImageUse(ctx, vmID, rec.ID); err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Name, err)
	}
	out := *img
	out.Path, out.Format = rec.Path, rec.Format
	return &out, nil
}
