package hypervisor

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// EnsurePool makes sure a directory storage pool called name exists at dir,
// is active and starts with libvirtd: it defines, builds (creating dir),
// starts and marks it autostart as needed. A pool of that name elsewhere is
// an error.
func (c *Conn) EnsurePool(ctx context.Context, name, dir string) error {
	if err := domain.ValidName(name); err != nil {
		return storageError(name, "", "ensure", err)
	}
	if !filepath.IsAbs(dir) {
		return storageError(name, "", "ensure", fmt.Errorf("directory %q is not absolute", dir))
	}
	dir = filepath.Clean(dir)
	p, err := c.pool(ctx, name)
	if IsNotFound(err) {
		x := &libvirtxml.StoragePool{
			Type:   "dir",
			Name:   name,
			Target: &libvirtxml.StoragePoolTarget{Path: dir, Permissions: &libvirtxml.StoragePoolTargetPermissions{Mode: "0711"}},
		}
		doc, merr := x.Marshal()
		if merr != nil {
			return storageError(name, "", "define", merr)
		}
		p, err = call(ctx, c, "define pool", 0, func() (*libvirt.StoragePool, error) {
			return c.lv.StoragePoolDefineXML(doc, 0)
		}, func(p *libvirt.StoragePool) { _ = p.Free() })
		if err != nil {
			return storageError(name, "", "define", err)
		}
		c.log.Info("storage pool defined", "pool", name, "dir", dir)
	} else if err != nil {
		return err
	}
	defer p.Free()

	doc, err := call(ctx, c, "pool XML", 0, func() (string, error) { return p.GetXMLDesc(0) }, nil)
	if err != nil {
		return storageError(name, "", "read definition", err)
	}
	var px libvirtxml.StoragePool
	if err := px.Unmarshal(doc); err != nil {
		return storageError(name, "", "read definition", err)
	}
	if px.Type != "dir" || px.Target == nil || filepath.Clean(px.Target.Path) != dir {
		path := ""
		if px.Target != nil {
			path = px.Target.Path
		}
		return storageError(name, "", "ensure", fmt.Errorf("a %s pool of that name already exists at %q, not a directory pool at %q", px.Type, path, dir))
	}

	active, err := call(ctx, c, "pool active", 0, p.IsActive, nil)
	if err != nil {
		return storageError(name, "", "state", err)
	}
	if !active {
		// Build creates the directory; an existing one is fine.
		if err := c.do(ctx, "build pool", func() error { return p.Build(libvirt.STORAGE_POOL_BUILD_NEW) }); err != nil {
			c.log.Debug("storage pool build", "pool", name, "err", clean(err))
		}
		if err := c.do(ctx, "start pool", func() error { return p.Create(0) }); err != nil {
			return storageError(name, "", "start", err)
		}
		c.log.Info("storage pool started", "pool", name, "dir", dir)
	}
	if c.localUploads && c.isTestDriver() {
		// The test driver keeps volumes in memory; UploadVolume writes
		// files here when it cannot stream (tests only: localUploads).
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return storageError(name, "", "create directory", err)
		}
	}
	auto, err := call(ctx, c, "pool autostart", 0, p.GetAutostart, nil)
	if err == nil && !auto {
		if err := c.do(ctx, "pool autostart", func() error { return p.SetAutostart(true) }); err != nil {
			return storageError(name, "", "set autostart", err)
		}
	}
	return nil
}

// PreparePool makes the storage pool called name usable and reports
// whether it made it. A pool of that name, wherever its directory, is used
// as it is: started when it is not active, its definition and autostart
// untouched. A missing one is made at dir by EnsurePool (defined, built,
// started, autostarted).
func (c *Conn) PreparePool(ctx context.Context, name, dir string) (made bool, err error) {
	p, err := c.pool(ctx, name)
	if IsNotFound(err) {
		if err := c.EnsurePool(ctx, name, dir); err != nil {
			return false, err
		}
		return true, nil
	}
	if err != nil {
		return false, err
	}
	defer p.Free()
	active, err := call(ctx, c, "pool active", 0, p.IsActive, nil)
	if err != nil {
		return false, storageError(name, "", "state", err)
	}
	if !active {
		// Its directory may be gone (a checkout removed): make it again,
		// as the definition says; an existing one is fine.
		if err := c.do(ctx, "build pool", func() error { return p.Build(libvirt.STORAGE_POOL_BUILD_NEW) }); err != nil {
			c.log.Debug("storage pool build", "pool", name, "err", clean(err))
		}
		if err := c.do(ctx, "start pool", func() error { return p.Create(0) }); err != nil {
			return false, storageError(name, "", "start", err)
		}
		c.log.Info("storage pool started", "pool", name)
	}
	return false, nil
}

// PoolState is what libvirt says of a storage pool.
type PoolState struct {
	Dir       string // its target directory
	Active    bool
	Autostart bool
}

// PoolInfo reads a pool's directory and state.
func (c *Conn) PoolInfo(ctx context.Context, name string) (PoolState, error) {
	p, err := c.pool(ctx, name)
	if err != nil {
		return PoolState{}, err
	}
	defer p.Free()
	doc, err := call(ctx, c, "pool XML", 0, func() (string, error) { return p.GetXMLDesc(0) }, nil)
	if err != nil {
		return PoolState{}, storageError(name, "", "read definition", err)
	}
	var px libvirtxml.StoragePool
	if err := px.Unmarshal(doc); err != nil {
		return PoolState{}, storageError(name, "", "read definition", err)
	}
	var st PoolState
	if px.Target != nil {
		st.Dir = px.Target.Path
	}
	if st.Active, err = call(ctx, c, "pool active", 0, p.IsActive, nil); err != nil {
		return PoolState{}, storageError(name, "", "state", err)
	}
	if st.Autostart, err = call(ctx, c, "pool autostart", 0, p.GetAutostart, nil); err != nil {
		return PoolState{}, storageError(name, "", "autostart", err)
	}
	return st, nil
}

// DeletePool stops and undefines a pool, leaving its directory and files.
func (c *Conn) DeletePool(ctx context.Context, name string) error {
	p, err := c.pool(ctx, name)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer p.Free()
	if active, _ := call(ctx, c, "pool active", 0, p.IsActive, nil); active {
		if err := c.do(ctx, "stop pool", p.Destroy); err != nil {
			return storageError(name, "", "stop", err)
		}
	}
	if err := c.do(ctx, "undefine pool", p.Undefine); err != nil && !IsNotFound(err) {
		return storageError(name, "", "undefine", err)
	}
	return nil
}

func (c *Conn) pool(ctx context.Context, name string) (*libvirt.StoragePool, error) {
	p, err := call(ctx, c, "lookup pool", 0, func() (*libvirt.StoragePool, error) {
		return c.lv.LookupStoragePoolByName(name)
	}, func(p *libvirt.StoragePool) { _ = p.Free() })
	if err != nil {
		return nil, storageError(name, "", "lookup", err)
	}
	return p, nil
}

func (c *Conn) volume(ctx context.Context, pool, name string) (*libvirt.StorageVol, error) {
	p, err := c.pool(ctx, pool)
	if err != nil {
		return nil, err
	}
	defer p.Free()
	v, err := call(ctx, c, "lookup volume", 0, func() (*libvirt.StorageVol, error) {
		return p.LookupStorageVolByName(name)
	}, func(v *libvirt.StorageVol) { _ = v.Free() })
	if err != nil {
		return nil, storageError(pool, name, "lookup", err)
	}
	return v, nil
}

// Overlay describes a copy-on-write disk on a base image.
type Overlay struct {
	Pool string
	Name string // volume name, "vm-42.qcow2"
	// Base is the path of the base image; BaseFormat its format ("qcow2"
	// or "raw"; empty reads it from the file).
	Base       string
	BaseFormat domain.DiskFormat
	// SizeBytes is the disk size the guest sees; 0 means the base's.
	SizeBytes uint64
}

// CreateOverlay creates a qcow2 volume backed by a base image, through the
// storage API (libvirt runs qemu-img). It returns the volume's path.
func (c *Conn) CreateOverlay(ctx context.Context, o Overlay) (string, error) {
	if err := volumeName(o.Name); err != nil {
		return "", storageError(o.Pool, o.Name, "create overlay", err)
	}
	if !filepath.IsAbs(o.Base) {
		return "", storageError(o.Pool, o.Name, "create overlay", fmt.Errorf("base image %q is not an absolute path", o.Base))
	}
	format, size := o.BaseFormat, o.SizeBytes
	if format == "" || size == 0 {
		f, s, err := imageInfo(o.Base)
		if err != nil {
			return "", storageError(o.Pool, o.Name, "create overlay", fmt.Errorf("base image: %w", err))
		}
		if format == "" {
			format = f
		}
		if size == 0 {
			size = s
		}
	}
	if size == 0 {
		return "", storageError(o.Pool, o.Name, "create overlay", fmt.Errorf("size unknown: base image %q is empty", o.Base))
	}
	x := &libvirtxml.StorageVolume{
		Name:     o.Name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: size},
		Target: &libvirtxml.StorageVolumeTarget{
			Format:      &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"},
			Permissions: &libvirtxml.StorageVolumeTargetPermissions{Mode: "0600"},
		},
		BackingStore: &libvirtxml.StorageVolumeBackingStore{
			Path:   o.Base,
			Format: &libvirtxml.StorageVolumeTargetFormat{Type: string(format)},
		},
	}
	return c.createVolume(ctx, o.Pool, o.Name, x, "create overlay")
}

func (c *Conn) createVolume(ctx context.Context, pool, name string, x *libvirtxml.StorageVolume, op string) (string, error) {
	doc, err := x.Marshal()
	if err != nil {
		return "", storageError(pool, name, op, err)
	}
	p, err := c.pool(ctx, pool)
	if err != nil {
		return "", err
	}
	defer p.Free()
	v, err := call(ctx, c, "create volume", 0, func() (*libvirt.StorageVol, error) {
		return p.StorageVolCreateXML(doc, 0)
	}, func(v *libvirt.StorageVol) { _ = v.Free() })
	if err != nil {
		return "", storageError(pool, name, op, err)
	}
	defer v.Free()
	path, err := call(ctx, c, "volume path", 0, v.GetPath, nil)
	if err != nil {
		return "", storageError(pool, name, op, err)
	}
	c.log.Info("volume created", "pool", pool, "volume", name, "path", path)
	return path, nil
}

// UploadVolume creates a raw volume holding data (a cloud-init seed ISO)
// and returns its path. The bytes travel through a libvirt stream. A driver
// that cannot upload (libvirt says VIR_ERR_NO_SUPPORT: the test driver)
// gets an error that wraps ErrNoUpload, and no volume is left; in this
// package's tests (localUploads) the test driver gets the bytes written to
// the volume's path instead, which DeleteVolume then removes.
func (c *Conn) UploadVolume(ctx context.Context, pool, name string, data []byte) (string, error) {
	if err := volumeName(name); err != nil {
		return "", storageError(pool, name, "upload", err)
	}
	if len(data) == 0 {
		return "", storageError(pool, name, "upload", errors.New("no data"))
	}
	x := &libvirtxml.StorageVolume{
		Name:       name,
		Capacity:   &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: uint64(len(data))},
		Allocation: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: 0},
		Target: &libvirtxml.StorageVolumeTarget{
			Format:      &libvirtxml.StorageVolumeTargetFormat{Type: "raw"},
			Permissions: &libvirtxml.StorageVolumeTargetPermissions{Mode: "0600"},
		},
	}
	path, err := c.createVolume(ctx, pool, name, x, "upload")
	if err != nil {
		return "", err
	}
	if err := c.upload(ctx, pool, name, path, data); err != nil {
		// Leave nothing half-written behind.
		if derr := c.DeleteVolume(context.WithoutCancel(ctx), pool, name); derr != nil {
			err = errors.Join(err, derr)
		}
		return "", err
	}
	return path, nil
}

func (c *Conn) upload(ctx context.Context, pool, name, path string, data []byte) error {
	v, err := c.volume(ctx, pool, name)
	if err != nil {
		return err
	}
	defer v.Free()
	st, err := call(ctx, c, "new stream", 0, func() (*libvirt.Stream, error) { return c.lv.NewStream(0) },
		func(s *libvirt.Stream) { _ = s.Free() })
	if err != nil {
		return storageError(pool, name, "upload", err)
	}
	defer st.Free()
	err = c.do(ctx, "upload volume", func() error { return v.Upload(st, 0, uint64(len(data)), 0) })
	if isCode(err, libvirt.ERR_NO_SUPPORT) {
		if c.localUploads && c.isTestDriver() {
			return c.writeLocal(pool, name, path, data)
		}
		return storageError(pool, name, "upload", fmt.Errorf("%w: %w", ErrNoUpload, clean(err)))
	}
	if err != nil {
		return storageError(pool, name, "upload", err)
	}
	err = c.do(ctx, "send stream", func() error {
		r := bytes.NewReader(data)
		buf := make([]byte, 256<<10)
		for {
			n, rerr := r.Read(buf)
			for off := 0; off < n; {
				m, err := st.Send(buf[off:n])
				if err != nil {
					return err
				}
				off += m
			}
			if rerr == io.EOF {
				return st.Finish()
			}
		}
	})
	if err != nil {
		_ = st.Abort()
		return storageError(pool, name, "upload", err)
	}
	c.log.Info("volume uploaded", "pool", pool, "volume", name, "bytes", len(data))
	return nil
}

// writeLocal stands in for a stream upload on the test driver, in tests.
func (c *Conn) writeLocal(pool, name, path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return storageError(pool, name, "upload (local file, test driver)", err)
	}
	c.mu.Lock()
	c.localFiles[path] = true
	c.mu.Unlock()
	return nil
}

// DeleteVolume deletes a volume and its data. Deleting a missing volume is
// not an error.
func (c *Conn) DeleteVolume(ctx context.Context, pool, name string) error {
	v, err := c.volume(ctx, pool, name)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer v.Free()
	path, _ := call(ctx, c, "volume path", 0, v.GetPath, nil)
	err = c.do(ctx, "delete volume", func() error { return v.Delete(0) })
	if err != nil && !IsNotFound(err) {
		return storageError(pool, name, "delete", err)
	}
	c.mu.Lock()
	local := c.localFiles[path]
	delete(c.localFiles, path)
	c.mu.Unlock()
	if local {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return storageError(pool, name, "delete local file", err)
		}
	}
	c.log.Info("volume deleted", "pool", pool, "volume", name)
	return nil
}

// VolumeExists reports whether a volume exists.
func (c *Conn) VolumeExists(ctx context.Context, pool, name string) (bool, error) {
	v, err := c.volume(ctx, pool, name)
	if IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	v.Free()
	return true, nil
}

// Volumes lists the names of the volumes in a pool.
func (c *Conn) Volumes(ctx context.Context, pool string) ([]string, error) {
	p, err := c.pool(ctx, pool)
	if err != nil {
		return nil, err
	}
	defer p.Free()
	if err := c.do(ctx, "refresh pool", func() error { return p.Refresh(0) }); err != nil {
		return nil, storageError(pool, "", "refresh", err)
	}
	vols, err := call(ctx, c, "list volumes", 0, func() ([]libvirt.StorageVol, error) { return p.ListAllStorageVolumes(0) },
		func(vs []libvirt.StorageVol) {
			for i := range vs {
				_ = vs[i].Free()
			}
		})
	if err != nil {
		return nil, storageError(pool, "", "list volumes", err)
	}
	var names []string
	for i := range vols {
		if n, err := vols[i].GetName(); err == nil {
			names = append(names, n)
		}
		_ = vols[i].Free()
	}
	return names, nil
}

func volumeName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 255 || strings.ContainsAny(name, "/\x00\n") {
		return fmt.Errorf("%q is not a volume name", name)
	}
	return nil
}

// imageInfo reads an image's format and virtual size: qcow2 from its header
// (magic "QFI\xfb", size at offset 24), anything else as raw.
func imageInfo(path string) (domain.DiskFormat, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	var hdr [32]byte
	_, err = io.ReadFull(f, hdr[:])
	if err == nil && string(hdr[:4]) == "QFI\xfb" {
		return domain.FormatQCOW2, binary.BigEndian.Uint64(hdr[24:32]), nil
	}
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	return domain.FormatRaw, uint64(st.Size()), nil
}
