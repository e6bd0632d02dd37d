//go:build linux && (amd64 || arm64 || riscv64 || loong64 || s390x)

package quota

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// quotactl(2) and the inode flags ioctls. These architectures encode
// ioctl numbers the asm-generic way (include/uapi/asm-generic/ioctl.h),
// which FS_IOC_FS[GS]ETXATTR below assume; others get quota_other.go.
const (
	// include/uapi/linux/quota.h: QCMD(cmd, type) = cmd<<8 | type&0xff.
	subCmdShift = 8
	qGetQuota   = 0x800007 // Q_GETQUOTA: one id's if_dqblk
	qSetQuota   = 0x800008 // Q_SETQUOTA: set one id's if_dqblk
	prjQuota    = 2        // PRJQUOTA
	// QIF_BLIMITS | QIF_SPACE: the block limits, and the space used.
	qifBLimits = 1
	qifSpace   = 2
	// QIF_DQBLKSIZE: dqb_bhardlimit and dqb_bsoftlimit count 1 KiB blocks.
	dqBlkSize = 1024

	// include/uapi/linux/dqblk_xfs.h: Q_XGETQSTAT = XQM_CMD(5) =
	// ('X'<<8)+5, answering a fs_quota_stat whose qs_flags (a __u16 at
	// offset 2) has FS_QUOTA_PDQ_ACCT (1<<4) and FS_QUOTA_PDQ_ENFD (1<<5).
	// The generic quota code answers it for ext4 too (fs/quota/quota.c
	// quota_getxstate).
	qXGetQStat  = 'X'<<8 + 5
	pdqAcct     = 1 << 4
	pdqEnfd     = 1 << 5
	qsFlagsAt   = 2
	qStatBufLen = 256 // > sizeof(struct fs_quota_stat), 80

	// include/uapi/linux/fs.h: struct fsxattr is 28 bytes;
	// FS_IOC_FSGETXATTR = _IOR('X', 31, struct fsxattr),
	// FS_IOC_FSSETXATTR = _IOW('X', 32, struct fsxattr).
	fsIocFSGetXattr    = 0x801c581f
	fsIocFSSetXattr    = 0x401c5820
	fsXflagProjInherit = 0x00000200 // FS_XFLAG_PROJINHERIT

	// statfs(2) f_type of the filesystems with project quotas
	// (include/uapi/linux/magic.h).
	ext4Magic = 0xEF53
	xfsMagic  = 0x58465342
)

// ifDqblk is include/uapi/linux/quota.h's struct if_dqblk.
type ifDqblk struct {
	BHardLimit uint64
	BSoftLimit uint64
	CurSpace   uint64
	IHardLimit uint64
	ISoftLimit uint64
	CurInodes  uint64
	BTime      uint64
	ITime      uint64
	Valid      uint32
	_          uint32
}

// fsxattr is include/uapi/linux/fs.h's struct fsxattr.
type fsxattr struct {
	XFlags     uint32
	ExtSize    uint32
	NExtents   uint32
	ProjID     uint32
	CowExtSize uint32
	Pad        [8]byte
}

// fsTypes names the statfs types gpuvm's hosts are likely to have.
var fsTypes = map[int64]string{ext4Magic: "ext4", xfsMagic: "xfs", 0x01021994: "tmpfs", 0x9123683E: "btrfs",
	0x6969: "nfs", 0x2FC12FC1: "zfs", 0x794C7630: "overlayfs", 0xFF534D42: "cifs", 0x65735546: "fuse"}

// quotactl is quotactl(2) on the block device dev.
func quotactl(cmd int, dev string, id uint32, addr unsafe.Pointer) error {
	p, err := unix.BytePtrFromString(dev)
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall6(unix.SYS_QUOTACTL, uintptr(cmd), uintptr(unsafe.Pointer(p)), uintptr(id), uintptr(addr), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func qcmd(cmd, typ int) int { return cmd<<subCmdShift | typ&0xff }

// Probe says whether dir's filesystem counts and enforces project quotas.
// An error is a directory that cannot be looked at.
func Probe(dir string) (Enforcement, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return Enforcement{}, fmt.Errorf("quotas of %s: %w", dir, err)
	}
	typ := int64(sfs.Type) //nolint:unconvert // int32 on some architectures
	e := Enforcement{Mode: None, FSType: fsTypes[typ]}
	if e.FSType == "" {
		e.FSType = fmt.Sprintf("a filesystem of type %#x", typ)
	}
	if typ != ext4Magic && typ != xfsMagic {
		e.Why = e.FSType + " has no project quotas gpuvm can use"
		return e, nil
	}
	dev, err := blockDevice(dir)
	if err != nil {
		e.Why = err.Error()
		return e, nil
	}
	buf := make([]byte, qStatBufLen)
	if err := quotactl(qcmd(qXGetQStat, prjQuota), dev, 0, unsafe.Pointer(&buf[0])); err != nil {
		e.Why = fmt.Sprintf("quotas are off on %s (quotactl: %v)", dev, err)
		return e, nil
	}
	flags := uint16(buf[qsFlagsAt]) | uint16(buf[qsFlagsAt+1])<<8
	if isBigEndian() {
		flags = uint16(buf[qsFlagsAt])<<8 | uint16(buf[qsFlagsAt+1])
	}
	switch {
	case flags&pdqAcct == 0:
		e.Why = dev + " is mounted without project quotas"
	case flags&pdqEnfd == 0:
		e.Why = dev + " counts project quotas but does not enforce them (pqnoenforce)"
	default:
		e.Mode, e.Device, e.Why = Project, dev, "project quotas on "+dev
	}
	return e, nil
}

func isBigEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 0
}

// blockDevice is the block device of the filesystem dir is on, from
// /proc/self/mountinfo: /dev/block/MAJOR:MINOR when there is one (it
// resolves device-mapper and /dev/root alike), else the mount's source.
func blockDevice(dir string) (string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return "", err
	}
	major, minor := unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)) //nolint:unconvert
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	mounts, err := ParseMountinfo(string(b))
	if err != nil {
		return "", err
	}
	m, ok := MountOf(mounts, major, minor, real)
	if !ok {
		return "", fmt.Errorf("no mount of device %d:%d holds %s in /proc/self/mountinfo", major, minor, real)
	}
	if p := fmt.Sprintf("/dev/block/%d:%d", major, minor); exists(p) {
		return p, nil
	}
	if filepath.IsAbs(m.Source) && exists(m.Source) {
		return m.Source, nil
	}
	return "", fmt.Errorf("the device of %s (%s, %d:%d) is not in /dev", m.MountPoint, m.Source, major, minor)
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// SetProject gives dir the project id with the inherit flag, so that what
// is made in it later is counted in the project; when dir did not have it
// yet, everything already in it is given the id too (one walk; symbolic
// links and special files are not, they take no blocks of their own).
func SetProject(dir string, id uint32) error {
	same, err := setProjectOne(dir, id, true)
	if err != nil || same {
		return err
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		case path == dir || !(d.IsDir() || d.Type().IsRegular()):
			return nil
		}
		if _, err := setProjectOne(path, id, d.IsDir()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
}

// setProjectOne sets one file's project id (and, on a directory, the
// inherit flag); same: it had them already.
func setProjectOne(path string, id uint32, dir bool) (same bool, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, fmt.Errorf("project of %s: %w", path, err)
	}
	defer f.Close()
	var x fsxattr
	if err := ioctl(f, fsIocFSGetXattr, &x); err != nil {
		return false, fmt.Errorf("project of %s: FS_IOC_FSGETXATTR: %w", path, err)
	}
	want := x.XFlags
	if dir {
		want |= fsXflagProjInherit
	}
	if x.ProjID == id && x.XFlags == want {
		return true, nil
	}
	x.ProjID, x.XFlags = id, want
	if err := ioctl(f, fsIocFSSetXattr, &x); err != nil {
		return false, fmt.Errorf("set project %d on %s: FS_IOC_FSSETXATTR: %w", id, path, err)
	}
	return false, nil
}

func ioctl(f *os.File, req uintptr, x *fsxattr) error {
	c, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var e syscall.Errno
	if err := c.Control(func(fd uintptr) {
		_, _, e = unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(unsafe.Pointer(x)))
	}); err != nil {
		return err
	}
	if e != 0 {
		return e
	}
	return nil
}

// SetLimit sets project id's block limit on the device (Probe's), hard and
// soft alike, rounded up to whole KiB; 0 clears it.
func SetLimit(dev string, id uint32, bytes uint64) error {
	kib := (bytes + dqBlkSize - 1) / dqBlkSize
	q := ifDqblk{BHardLimit: kib, BSoftLimit: kib, Valid: qifBLimits}
	if err := quotactl(qcmd(qSetQuota, prjQuota), dev, id, unsafe.Pointer(&q)); err != nil {
		return fmt.Errorf("set the quota of project %d on %s: %w", id, dev, err)
	}
	return nil
}

// Get reads project id's usage and limit on the device.
func Get(dev string, id uint32) (Usage, error) {
	var q ifDqblk
	if err := quotactl(qcmd(qGetQuota, prjQuota), dev, id, unsafe.Pointer(&q)); err != nil {
		return Usage{}, fmt.Errorf("read the quota of project %d on %s: %w", id, dev, err)
	}
	u := Usage{Used: q.CurSpace}
	if q.Valid&qifBLimits != 0 {
		u.Limit = q.BHardLimit * dqBlkSize
	}
	return u, nil
}

func unsafeSizeofDqblk() uintptr   { return unsafe.Sizeof(ifDqblk{}) }
func unsafeSizeofFsxattr() uintptr { return unsafe.Sizeof(fsxattr{}) }
