package store

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm/clause"
)

// ErrImageNameTaken: an import named an image that exists (a new version of
// an image comes from publishing a VM's disk). It matches ErrConflict.
var ErrImageNameTaken = fmt.Errorf("%w: image name taken", ErrConflict)

// ImageInUseError refuses deleting an image version that live VMs' disks
// are made on. It matches ErrConflict.
type ImageInUseError struct {
	Image string // NAME@VERSION
	VMs   []string
}

func (e *ImageInUseError) Error() string {
	return fmt.Sprintf("image %s is used by %d VM(s): %s", e.Image, len(e.VMs), strings.Join(e.VMs, ", "))
}

// Is makes an ImageInUseError match ErrConflict.
func (e *ImageInUseError) Is(target error) bool { return target == ErrConflict }

// ImageRef is how an image version is written: NAME@VERSION.
func ImageRef(name string, version int) string { return fmt.Sprintf("%s@%d", name, version) }

// CreateImage records a stored image version. With newName (an import) the
// name must be new and the version is 1 (ErrImageNameTaken otherwise);
// without (a publish) the version is one more than the newest of the name,
// or 1. It fills img's ID, Version and CreatedAt.
func (s *Store) CreateImage(ctx context.Context, img *Image, newName bool) error {
	if strings.TrimSpace(img.Name) == "" || img.Pool == "" || img.Volume == "" {
		return fmt.Errorf("create image: %w: name, pool and volume are required", ErrInvalid)
	}
	return s.Tx(ctx, func(tx *Store) error {
		var newest int
		if err := tx.db.Model(&Image{}).Where("name = ?", img.Name).Select("COALESCE(MAX(version), 0)").Row().Scan(&newest); err != nil {
			return wrap(err, nil, "read the versions of image %s", img.Name)
		}
		if newName && newest > 0 {
			return fmt.Errorf("import image %s: %w (it has %d version(s); publish a VM to add one, or delete it first)", img.Name, ErrImageNameTaken, newest)
		}
		img.ID, img.Version, img.CreatedAt = 0, newest+1, tx.clock()
		if err := tx.db.Create(img).Error; err != nil {
			return wrap(err, nil, "create image %s", ImageRef(img.Name, img.Version))
		}
		return nil
	})
}

// ImageExists reports whether an image of that name has any version.
func (s *Store) ImageExists(ctx context.Context, name string) (bool, error) {
	var n int64
	if err := s.db.WithContext(ctx).Model(&Image{}).Where("name = ?", name).Count(&n).Error; err != nil {
		return false, wrap(err, nil, "look up image %s", name)
	}
	return n > 0, nil
}

// ListImages is every image version, by name then version.
func (s *Store) ListImages(ctx context.Context) ([]Image, error) {
	var out []Image
	if err := s.db.WithContext(ctx).Order("name, version").Find(&out).Error; err != nil {
		return nil, wrap(err, nil, "list images")
	}
	for i := range out {
		out[i].CreatedAt = out[i].CreatedAt.UTC()
	}
	return out, nil
}

// GetImage is a version of an image; version 0 is the newest. A missing one
// is ErrNotFound.
func (s *Store) GetImage(ctx context.Context, name string, version int) (*Image, error) {
	q := s.db.WithContext(ctx).Where("name = ?", name)
	what := name + " (newest)"
	if version > 0 {
		q, what = q.Where("version = ?", version), ImageRef(name, version)
	}
	var img Image
	if err := q.Order("version DESC").Take(&img).Error; err != nil {
		return nil, wrap(err, nil, "get image %s", what)
	}
	img.CreatedAt = img.CreatedAt.UTC()
	return &img, nil
}

// RecordImageUse records that a VM's disk overlay is made on an image
// version (replacing an earlier record of the VM). A missing VM or image is
// ErrNotFound: a create racing a delete of its image fails here.
func (s *Store) RecordImageUse(ctx context.Context, vmID string, imageID int64) error {
	u := ImageUse{VMID: vmID, ImageID: imageID, CreatedAt: s.clock()}
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "vm_id"}},
		DoUpdates: clause.AssignmentColumns([]string{"image_id", "created_at"}),
	}).Create(&u).Error
	return wrap(err, nil, "record that vm %s uses image %d", vmID, imageID)
}

// ImageUsers is, per image id, the live VMs (not deleted) whose disks are
// made on it: "OWNER/NAME (ID)", sorted.
func (s *Store) ImageUsers(ctx context.Context) (map[int64][]string, error) {
	var rows []struct {
		ImageID int64
		ID      string
		Owner   string
		Name    string
	}
	err := s.db.WithContext(ctx).Table("image_uses").
		Select("image_uses.image_id AS image_id, vms.id AS id, vms.owner AS owner, vms.name AS name").
		Joins("JOIN vms ON vms.id = image_uses.vm_id").
		Where("vms.state <> ?", VMDeleted).
		Order("vms.owner, vms.name, vms.id").Scan(&rows).Error
	if err != nil {
		return nil, wrap(err, nil, "list the VMs of images")
	}
	out := map[int64][]string{}
	for _, r := range rows {
		out[r.ImageID] = append(out[r.ImageID], fmt.Sprintf("%s/%s (%s)", r.Owner, r.Name, r.ID))
	}
	return out, nil
}

// DeleteImage forgets an image version, refusing (*ImageInUseError) while a
// live VM's disk is made on it; the records of deleted VMs' uses go with it.
// The caller deletes the volume once this succeeded.
func (s *Store) DeleteImage(ctx context.Context, id int64) error {
	return s.Tx(ctx, func(tx *Store) error {
		var img Image
		if err := tx.db.Where("id = ?", id).Take(&img).Error; err != nil {
			return wrap(err, nil, "delete image %d", id)
		}
		users, err := tx.ImageUsers(ctx)
		if err != nil {
			return err
		}
		if vms := users[id]; len(vms) > 0 {
			return &ImageInUseError{Image: ImageRef(img.Name, img.Version), VMs: vms}
		}
		if err := tx.db.Where("image_id = ?", id).Delete(&ImageUse{}).Error; err != nil {
			return wrap(err, nil, "forget the uses of image %s", ImageRef(img.Name, img.Version))
		}
		res := tx.db.Where("id = ?", id).Delete(&Image{})
		if res.Error != nil {
			return wrap(res.Error, nil, "delete image %s", ImageRef(img.Name, img.Version))
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("delete image %s: %w", ImageRef(img.Name, img.Version), ErrNotFound)
		}
		return nil
	})
}
