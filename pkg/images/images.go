// Package images keeps the disk images VMs start from: imported from a
// qcow2, raw or ISO file on the gpuvmd host, or published from a stopped
// VM's disk, each stored as a volume of the libvirt storage pool and
// recorded (name, version, format, sizes, SHA-256) in the store.
//
// An import streams the file into a new volume through libvirt while
// hashing it, then reads the copy's format and sizes with qemu-img (never
// the file's name). Whatever refuses it (a bad checksum, a format other than
// qcow2/raw/ISO, a taken name, a source that changed or vanished half-way)
// deletes the volume: a refused import leaves neither volume nor row.
package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// ErrInvalid: the request names something that cannot be an image (a bad
// name, OS, checksum or source file, a format gpuvm does not use). Nothing
// was stored.
var ErrInvalid = errors.New("invalid image")

// ErrChecksum: the bytes copied do not have the SHA-256 the caller gave.
// It matches ErrInvalid.
var ErrChecksum = fmt.Errorf("%w: checksum mismatch", ErrInvalid)

// ErrSourceChanged: the source file changed or vanished while it was copied.
// It matches ErrInvalid.
var ErrSourceChanged = fmt.Errorf("%w: the source changed while it was copied", ErrInvalid)

// ErrStorage: the storage pool (libvirt) failed while an image was being
// stored; the request was not at fault.
var ErrStorage = errors.New("the storage pool failed")

// FieldError refuses one value of a request, named as the API's request
// names it (api.ImportImageRequest, api.PublishImageRequest, the upload's
// path): name, os, firmware, sha256, source_path or upload. It matches
// ErrInvalid.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return ErrInvalid.Error() + ": " + e.Msg }

// Is makes a FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func fieldf(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// CheckName refuses (*FieldError on "name") what no image can be called.
func CheckName(name string) error {
	if !namePattern.MatchString(name) {
		return fieldf("name", "%q is not an image name (1 to 63 of lower-case letters, digits, '.', '_', '-', starting with a letter or digit)", clip(name, 80))
	}
	return nil
}

// clip shortens s to at most n bytes for a message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ErrNotStopped: publish needs a stopped VM.
var ErrNotStopped = fmt.Errorf("%w: the VM is not stopped", store.ErrConflict)

// Volumes is the storage pool (hypervisor.Conn).
type Volumes interface {
	StreamVolume(ctx context.Context, pool, name string, size uint64, r io.Reader) (string, error)
	FlattenVolume(ctx context.Context, pool, src, dst string) (string, error)
	DeleteVolume(ctx context.Context, pool, name string) error
	VolumeExists(ctx context.Context, pool, name string) (bool, error)
}

// Store records images (store.Store).
type Store interface {
	CreateImage(ctx context.Context, img *store.Image, newName bool) error
	ImageExists(ctx context.Context, name string) (bool, error)
	ListImages(ctx context.Context) ([]store.Image, error)
	GetImage(ctx context.Context, name string, version int) (*store.Image, error)
	ImageUsers(ctx context.Context) (map[int64][]string, error)
	DeleteImage(ctx context.Context, id int64) error
	GetVM(ctx context.Context, id string) (*store.VM, error)
}

// Manager imports, publishes, lists and deletes images.
type Manager struct {
	Store   Store
	Volumes Volumes
	// Pool is the storage pool images are stored in (server.libvirt.storage_pool).
	Pool string
	// QemuImg is the qemu-img binary; empty: "qemu-img" on PATH.
	QemuImg string
	// DomainName is the libvirt name of a VM's domain, whose disk overlay
	// is "<domain>.qcow2" in Pool.
	DomainName func(vmID string) string
	// Uploads holds the files sent through the API to import; nil: none
	// can be.
	Uploads *Uploads
	Log     *slog.Logger

	// copied, when set (tests), is called after each chunk read from an
	// import's source with the bytes read so far.
	copied func(n int64)
}

// Names, OS families, firmwares an image may have.
var (
	namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	sumPattern  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	OSFamilies  = []string{"linux", "windows"}
	Firmwares   = []string{"bios", "uefi"}
)

// ImportRequest is an import of a file on the gpuvmd host.
type ImportRequest struct {
	Source   string // absolute path of a qcow2, raw or ISO file
	Name     string
	OS       string // linux or windows
	Firmware string // uefi (default) or bios
	SHA256   string // optional: the checksum the copy must have
	By       string // who asks
	// Upload imports the file uploaded for Name (Uploads) instead of
	// Source; the upload is removed whatever the outcome.
	Upload bool
}

func (m *Manager) log() *slog.Logger {
	if m.Log == nil {
		return slog.Default()
	}
	return m.Log
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// checkMeta validates and defaults a name, OS and firmware.
func checkMeta(name, osFamily string, firmware *string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if !slices.Contains(OSFamilies, osFamily) {
		return fieldf("os", "os %q: want one of %v", clip(osFamily, 80), OSFamilies)
	}
	if *firmware == "" {
		*firmware = "uefi"
	}
	if !slices.Contains(Firmwares, *firmware) {
		return fieldf("firmware", "firmware %q: want one of %v", clip(*firmware, 80), Firmwares)
	}
	return nil
}

// VolumeName is the pool volume of an image version.
func VolumeName(name string, version int, format string) string {
	ext := format
	if format == FormatISO {
		ext = "iso"
	}
	return fmt.Sprintf("image-%s-v%d.%s", name, version, ext)
}

// Import copies a file into the pool and records it as version 1 of a new
// image. See the package comment for what refuses it.
func (m *Manager) Import(ctx context.Context, req ImportRequest) (*store.Image, error) {
	if err := checkMeta(req.Name, req.OS, &req.Firmware); err != nil {
		return nil, err
	}
	if req.Upload {
		if m.Uploads == nil {
			return nil, fieldf("upload", "this gpuvmd takes no uploads")
		}
		if req.Source != "" {
			return nil, fieldf("upload", "an import is of an upload or of a source path, not both")
		}
		p, err := m.Uploads.path(req.Name)
		if err != nil {
			return nil, err
		}
		req.Source = p
		defer func() {
			if err := m.Uploads.Remove(req.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
				m.log().Warn("removing an imported upload", "image", req.Name, "err", err)
			}
		}()
	}
	if req.SHA256 != "" && !sumPattern.MatchString(req.SHA256) {
		return nil, fieldf("sha256", "sha256 %q is not 64 lower-case hex digits", clip(req.SHA256, 80))
	}
	srcField := "source_path"
	if req.Upload {
		srcField = "upload"
	}
	if !filepath.IsAbs(req.Source) {
		return nil, fieldf(srcField, "source %q is not an absolute path on the gpuvmd host", clip(req.Source, 200))
	}
	if taken, err := m.Store.ImageExists(ctx, req.Name); err != nil {
		return nil, err
	} else if taken {
		return nil, fmt.Errorf("import %s: %w (publish a VM to add a version, or delete it first)", req.Name, store.ErrImageNameTaken)
	}
	f, err := os.Open(req.Source)
	if req.Upload && errors.Is(err, fs.ErrNotExist) {
		return nil, fieldf("upload", "nothing was uploaded for image %s (PUT /v1/admin/images/uploads/%s first)", req.Name, req.Name)
	}
	if err != nil {
		return nil, fieldf(srcField, "source: %v", err)
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		return nil, fieldf(srcField, "source: %v", err)
	}
	if !before.Mode().IsRegular() || before.Size() == 0 {
		return nil, fieldf(srcField, "source %s is not a non-empty regular file", req.Source)
	}
	// A quick look before copying: no point streaming a VMDK.
	probe, err := m.info(ctx, req.Source)
	if err != nil {
		return nil, onField(srcField, err)
	}
	format, err := imageFormat(probe, req.Source)
	if err != nil {
		return nil, onField(srcField, err)
	}
	vol := VolumeName(req.Name, 1, format)
	if exists, err := m.Volumes.VolumeExists(ctx, m.Pool, vol); err != nil {
		return nil, fmt.Errorf("import %s: %w: looking up volume %s in pool %s: %w", req.Name, ErrStorage, vol, m.Pool, err)
	} else if exists {
		return nil, fmt.Errorf("import %s: %w: volume %s already exists in pool %s (left by something else; delete it)", req.Name, store.ErrConflict, vol, m.Pool)
	}

	h := sha256.New()
	src := &countingReader{r: f, h: h, hook: m.copied}
	m.log().Info("importing image", "image", req.Name, "source", req.Source, "bytes", before.Size(), "pool", m.Pool, "volume", vol)
	path, err := m.Volumes.StreamVolume(ctx, m.Pool, vol, uint64(before.Size()), src)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("import %s: stopped after %d of %d bytes (the copy is removed): %w", req.Name, src.n, before.Size(), ctx.Err())
		}
		return nil, m.streamError(req, vol, src, before.Size(), err)
	}
	img := &store.Image{Name: req.Name, OS: req.OS, Firmware: req.Firmware, Pool: m.Pool, Volume: vol, Path: path,
		Origin: store.ImageImported, SourcePath: req.Source, CreatedBy: req.By, SHA256: hex.EncodeToString(h.Sum(nil))}
	if err := m.finish(ctx, img, func() error {
		after, err := os.Stat(req.Source)
		switch {
		case err != nil:
			return fmt.Errorf("%w: %v", ErrSourceChanged, err)
		case !os.SameFile(before, after) || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()):
			return fmt.Errorf("%w: %s was replaced or written to while it was copied", ErrSourceChanged, req.Source)
		case req.SHA256 != "" && req.SHA256 != img.SHA256:
			return fmt.Errorf("%w: %s has SHA-256 %s, not %s", ErrChecksum, req.Source, img.SHA256, req.SHA256)
		}
		return nil
	}, true); err != nil {
		return nil, fmt.Errorf("import %s: %w", req.Name, err)
	}
	m.log().Info("image imported", "image", store.ImageRef(img.Name, img.Version), "format", img.Format,
		"virtual_size", img.VirtualSize, "sha256", img.SHA256, "by", req.By)
	return img, nil
}

// finish reads the stored volume's format and sizes, runs check, and
// records the image; any failure deletes the volume.
func (m *Manager) finish(ctx context.Context, img *store.Image, check func() error, newName bool) (err error) {
	defer func() {
		if err != nil {
			if derr := m.Volumes.DeleteVolume(context.WithoutCancel(ctx), img.Pool, img.Volume); derr != nil {
				err = errors.Join(err, fmt.Errorf("removing the copy: %w", derr))
			}
		}
	}()
	if err := check(); err != nil {
		return err
	}
	info, err := m.info(ctx, img.Path)
	if err != nil {
		return err
	}
	if img.Format, err = imageFormat(info, img.Path); err != nil {
		return err
	}
	want := VolumeName(img.Name, 1, img.Format)
	if newName && want != img.Volume {
		return fmt.Errorf("%w: the copy is %s, the source looked like %s", ErrSourceChanged, img.Format, img.Volume)
	}
	img.VirtualSize, img.ActualSize = info.VirtualSize, info.ActualSize
	return m.Store.CreateImage(ctx, img, newName)
}

// streamError says why streaming the source into the pool failed: the
// source's fault, ErrSourceChanged (it could not be read, ended early or
// grew), or the pool's, ErrStorage; told apart by what the reader saw.
func (m *Manager) streamError(req ImportRequest, vol string, src *countingReader, size int64, err error) error {
	switch {
	case src.err != nil:
		return fmt.Errorf("import %s: %w: reading it failed after %d of %d bytes: %v", req.Name, ErrSourceChanged, src.n, size, src.err)
	case src.eof && src.n < size, src.n > size:
		return fmt.Errorf("import %s: %w (%d bytes read, %d when the copy began): %v", req.Name, ErrSourceChanged, src.n, size, err)
	}
	return fmt.Errorf("import %s: %w: storing the copy as volume %s of pool %s failed after %d of %d bytes read: %w", req.Name, ErrStorage, vol, m.Pool, src.n, size, err)
}

// onField makes an ErrInvalid that names no field a *FieldError on field.
func onField(field string, err error) error {
	var fe *FieldError
	if errors.Is(err, ErrInvalid) && !errors.As(err, &fe) {
		return &FieldError{Field: field, Msg: strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")}
	}
	return err
}

type countingReader struct {
	r    io.Reader
	h    hash.Hash
	n    int64
	err  error // the read error, not io.EOF
	eof  bool  // the source ended
	hook func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	if err == io.EOF {
		c.eof = true
	} else if err != nil {
		c.err = err
	}
	if c.hook != nil && n > 0 {
		c.hook(c.n)
	}
	return n, err
}

// PublishRequest turns a stopped VM's disk into a new version of an image.
type PublishRequest struct {
	VMID     string
	Name     string
	OS       string
	Firmware string
	By       string
}

// Publish flattens a stopped VM's disk overlay and its backing chain into a
// standalone qcow2 volume and records it as the next version of Name (1 for
// a new name). A VM that is not stopped is ErrNotStopped; one that changed
// while it was copied has the copy thrown away.
func (m *Manager) Publish(ctx context.Context, req PublishRequest) (*store.Image, error) {
	if err := checkMeta(req.Name, req.OS, &req.Firmware); err != nil {
		return nil, err
	}
	vm, err := m.Store.GetVM(ctx, req.VMID)
	if err != nil {
		return nil, err
	}
	if vm.State != store.VMStopped {
		return nil, fmt.Errorf("publish vm %s/%s: %w (it is %s; stop it first)", vm.Owner, vm.Name, ErrNotStopped, vm.State)
	}
	next := 1
	if cur, err := m.Store.GetImage(ctx, req.Name, 0); err == nil {
		next = cur.Version + 1
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	overlay := m.DomainName(vm.ID) + ".qcow2"
	vol := VolumeName(req.Name, next, FormatQCOW2)
	if exists, err := m.Volumes.VolumeExists(ctx, m.Pool, vol); err != nil {
		return nil, err
	} else if exists {
		return nil, fmt.Errorf("publish %s: %w: volume %s already exists in pool %s", req.Name, store.ErrConflict, vol, m.Pool)
	}
	m.log().Info("publishing image", "image", store.ImageRef(req.Name, next), "vm", vm.ID, "overlay", overlay)
	path, err := m.Volumes.FlattenVolume(ctx, m.Pool, overlay, vol)
	if err != nil {
		return nil, fmt.Errorf("publish vm %s/%s: %w", vm.Owner, vm.Name, err)
	}
	img := &store.Image{Name: req.Name, OS: req.OS, Firmware: req.Firmware, Pool: m.Pool, Volume: vol, Path: path,
		Origin: store.ImagePublished, SourceVM: vm.ID, CreatedBy: req.By}
	err = m.finish(ctx, img, func() error {
		now, err := m.Store.GetVM(ctx, vm.ID)
		if err != nil {
			return err
		}
		if now.Version != vm.Version || now.State != store.VMStopped {
			return fmt.Errorf("%w: vm %s/%s changed (%s) while its disk was copied; try again", store.ErrConflict, vm.Owner, vm.Name, now.State)
		}
		sum, err := fileSHA256(ctx, path)
		img.SHA256 = sum
		return err
	}, false)
	if err != nil {
		return nil, fmt.Errorf("publish vm %s/%s: %w", vm.Owner, vm.Name, err)
	}
	if img.Volume != VolumeName(img.Name, img.Version, img.Format) {
		// Another publish of the name took the version meanwhile; the
		// volume name is only a name, the row says which version it is.
		m.log().Warn("published image's volume is named for another version", "image", store.ImageRef(img.Name, img.Version), "volume", img.Volume)
	}
	m.log().Info("image published", "image", store.ImageRef(img.Name, img.Version), "vm", vm.ID, "virtual_size", img.VirtualSize, "sha256", img.SHA256, "by", req.By)
	return img, nil
}

func fileSHA256(ctx context.Context, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hashing the copy: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("hashing the copy: %w", err)
		}
		n, err := f.Read(buf)
		h.Write(buf[:n])
		if err == io.EOF {
			return hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return "", fmt.Errorf("hashing the copy: %w", err)
		}
	}
}

// UploadOffset is where the upload for image name ends (0: not started).
func (m *Manager) UploadOffset(name string) (int64, error) {
	if m.Uploads == nil {
		return 0, invalidf("this gpuvmd takes no uploads")
	}
	return m.Uploads.Offset(name)
}

// UploadChunk appends a chunk to the upload for image name at offset.
func (m *Manager) UploadChunk(name string, offset int64, r io.Reader) (int64, error) {
	if m.Uploads == nil {
		return 0, invalidf("this gpuvmd takes no uploads")
	}
	return m.Uploads.Write(name, offset, r)
}

// DiscardUpload forgets the upload for image name.
func (m *Manager) DiscardUpload(name string) error {
	if m.Uploads == nil {
		return invalidf("this gpuvmd takes no uploads")
	}
	return m.Uploads.Remove(name)
}

// Get is a version of an image (0: the newest).
func (m *Manager) Get(ctx context.Context, name string, version int) (*store.Image, error) {
	return m.Store.GetImage(ctx, name, version)
}

// Entry is an image version as listed: the record, the live VMs whose disks
// are made on it.
type Entry struct {
	store.Image
	VMs []string `json:"vms"`
}

// List is every image version with its VMs.
func (m *Manager) List(ctx context.Context) ([]Entry, error) {
	imgs, err := m.Store.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	users, err := m.Store.ImageUsers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, Entry{Image: img, VMs: append([]string{}, users[img.ID]...)})
	}
	return out, nil
}

// Delete deletes a version of an image, or with version 0 every version,
// and their volumes. While a live VM's disk is made on one it refuses
// (*store.ImageInUseError) and deletes nothing. It returns what it deleted.
func (m *Manager) Delete(ctx context.Context, name string, version int) ([]store.Image, error) {
	var victims []store.Image
	if version > 0 {
		img, err := m.Store.GetImage(ctx, name, version)
		if err != nil {
			return nil, err
		}
		victims = append(victims, *img)
	} else {
		all, err := m.Store.ListImages(ctx)
		if err != nil {
			return nil, err
		}
		for _, img := range all {
			if img.Name == name {
				victims = append(victims, img)
			}
		}
		if len(victims) == 0 {
			return nil, fmt.Errorf("delete image %s: %w", name, store.ErrNotFound)
		}
	}
	users, err := m.Store.ImageUsers(ctx)
	if err != nil {
		return nil, err
	}
	inUse := &store.ImageInUseError{Image: name}
	if version > 0 {
		inUse.Image = store.ImageRef(name, version)
	}
	for _, img := range victims {
		inUse.VMs = append(inUse.VMs, users[img.ID]...)
	}
	if len(inUse.VMs) > 0 {
		return nil, inUse
	}
	var done []store.Image
	for _, img := range victims {
		// The row first: a VM created meanwhile on this version fails to
		// record its use, instead of finding its base volume gone.
		if err := m.Store.DeleteImage(ctx, img.ID); err != nil {
			return done, err
		}
		if err := m.Volumes.DeleteVolume(ctx, img.Pool, img.Volume); err != nil {
			return done, fmt.Errorf("image %s forgotten, but its volume stays: %w", store.ImageRef(img.Name, img.Version), err)
		}
		m.log().Info("image deleted", "image", store.ImageRef(img.Name, img.Version), "volume", img.Volume)
		done = append(done, img)
	}
	return done, nil
}
