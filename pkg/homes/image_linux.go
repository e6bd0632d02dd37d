package homes

import (
	"fmt"
	"syscall"
)

// sharedMagic are the statfs(2) magic numbers of filesystems that hosts
// share (linux/magic.h, and GPFS's).
var sharedMagic = map[int64]string{
	0x6969:     "NFS",
	0xff534d42: "CIFS",
	0xfe534d42: "SMB2",
	0x517b:     "SMB",
	0x00c36400: "CephFS",
	0x65735546: "a FUSE filesystem",
	0x0bd00bd0: "Lustre",
	0x01021997: "9p",
	0x47504653: "GPFS",
	0x6b414653: "AFS",
}

// sharedFS says whether dir is on a filesystem hosts share, and which.
func sharedFS(dir string) (string, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "", false
	}
	name, ok := sharedMagic[int64(st.Type)]
	return name, ok
}

// fsUsage is what the filesystem mounted at dir counts: bytes used, and
// what it can hold, used and available together (statfs(2): ext4 leaves
// its own bookkeeping out of both, and the clusters it keeps back for
// its delayed allocations out of what is available).
func fsUsage(dir string) (used, capacity uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("home's filesystem: %w", err)
	}
	bs := uint64(st.Bsize)
	used = (st.Blocks - st.Bfree) * bs
	return used, used + st.Bavail*bs, nil
}
