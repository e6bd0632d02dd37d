package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// Disk images (pkg/images) are streamed into their pool and flattened from
// a VM's overlay here.

// longCall bounds a libvirt call that copies a whole disk.
const longCall = 2 * time.Hour

// StreamVolume creates a raw volume of size bytes in pool and fills it from
// r through a libvirt stream (virStorageVolUpload), one call per chunk so
// that ctx ends it between chunks. r must yield exactly size bytes. On any
// failure the volume is deleted: nothing half-written stays. It returns the
// volume's path.
func (c *Conn) StreamVolume(ctx context.Context, pool, name string, size uint64, r io.Reader) (string, error) {
	if err := volumeName(name); err != nil {
		return "", storageError(pool, name, "stream", err)
	}
	if size == 0 {
		return "", storageError(pool, name, "stream", errors.New("no data"))
	}
	x := &libvirtxml.StorageVolume{
		Name:       name,
		Capacity:   &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: size},
		Allocation: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: 0},
		Target: &libvirtxml.StorageVolumeTarget{
			Format:      &libvirtxml.StorageVolumeTargetFormat{Type: "raw"},
			Permissions: &libvirtxml.StorageVolumeTargetPermissions{Mode: "0600"},
		},
	}
	path, err := c.createVolume(ctx, pool, name, x, "stream")
	if err != nil {
		return "", err
	}
	if err := c.stream(ctx, pool, name, size, r); err != nil {
		if derr := c.DeleteVolume(context.WithoutCancel(ctx), pool, name); derr != nil {
			err = errors.Join(err, derr)
		}
		return "", err
	}
	return path, nil
}

func (c *Conn) stream(ctx context.Context, pool, name string, size uint64, r io.Reader) error {
	v, err := c.volume(ctx, pool, name)
	if err != nil {
		return err
	}
	defer v.Free()
	st, err := call(ctx, c, "new stream", 0, func() (*libvirt.Stream, error) { return c.lv.NewStream(0) },
		func(s *libvirt.Stream) { _ = s.Free() })
	if err != nil {
		return storageError(pool, name, "stream", err)
	}
	defer st.Free()
	if err := c.do(ctx, "upload volume", func() error { return v.Upload(st, 0, size, 0) }); err != nil {
		return storageError(pool, name, "stream", err)
	}
	buf := make([]byte, 1<<20)
	var sent uint64
	fail := func(err error) error {
		_ = st.Abort()
		return storageError(pool, name, "stream", err)
	}
	for {
		n, rerr := r.Read(buf)
		if sent+uint64(n) > size {
			return fail(fmt.Errorf("the source has more than the %d bytes announced", size))
		}
		for off := 0; off < n; {
			var m int
			if err := c.do(ctx, "send stream", func() (err error) { m, err = st.Send(buf[off:n]); return err }); err != nil {
				return fail(err)
			}
			off += m
		}
		sent += uint64(n)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fail(fmt.Errorf("reading the source after %d bytes: %w", sent, rerr))
		}
	}
	if sent != size {
		return fail(fmt.Errorf("the source ended after %d of %d bytes", sent, size))
	}
	if err := c.do(ctx, "finish stream", st.Finish); err != nil {
		return fail(err)
	}
	c.log.Info("volume streamed", "pool", pool, "volume", name, "bytes", sent)
	return nil
}

// FlattenVolume creates volume dst in pool as a standalone qcow2 copy of
// volume src with its whole backing chain merged in (libvirt's
// virStorageVolCreateXMLFrom, which runs qemu-img convert). It returns the
// new volume's path; a failure leaves no dst behind.
func (c *Conn) FlattenVolume(ctx context.Context, pool, src, dst string) (string, error) {
	if err := volumeName(dst); err != nil {
		return "", storageError(pool, dst, "flatten", err)
	}
	sv, err := c.volume(ctx, pool, src)
	if err != nil {
		return "", err
	}
	defer sv.Free()
	info, err := call(ctx, c, "volume info", 0, sv.GetInfo, nil)
	if err != nil {
		return "", storageError(pool, src, "flatten", err)
	}
	x := &libvirtxml.StorageVolume{
		Name:     dst,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: info.Capacity},
		Target: &libvirtxml.StorageVolumeTarget{
			Format:      &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"},
			Permissions: &libvirtxml.StorageVolumeTargetPermissions{Mode: "0600"},
		},
	}
	doc, err := x.Marshal()
	if err != nil {
		return "", storageError(pool, dst, "flatten", err)
	}
	p, err := c.pool(ctx, pool)
	if err != nil {
		return "", err
	}
	defer p.Free()
	v, err := call(ctx, c, "create volume from", longCall, func() (*libvirt.StorageVol, error) {
		return p.StorageVolCreateXMLFrom(doc, sv, 0)
	}, func(v *libvirt.StorageVol) { _ = v.Free() })
	if err != nil {
		// libvirt removes a half-made copy itself; make sure.
		_ = c.DeleteVolume(context.WithoutCancel(ctx), pool, dst)
		return "", storageError(pool, dst, "flatten "+src, err)
	}
	defer v.Free()
	path, err := call(ctx, c, "volume path", 0, v.GetPath, nil)
	if err != nil {
		return "", storageError(pool, dst, "flatten", err)
	}
	c.log.Info("volume flattened", "pool", pool, "from", src, "volume", dst, "path", path)
	return path, nil
}

// VolumePath is the path of a volume; a missing one is a not-found error.
func (c *Conn) VolumePath(ctx context.Context, pool, name string) (string, error) {
	v, err := c.volume(ctx, pool, name)
	if err != nil {
		return "", err
	}
	defer v.Free()
	path, err := call(ctx, c, "volume path", 0, v.GetPath, nil)
	if err != nil {
		return "", storageError(pool, name, "path", err)
	}
	return path, nil
}
