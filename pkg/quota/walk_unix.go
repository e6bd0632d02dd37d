//go:build unix

package quota

import (
	"io/fs"
	"syscall"
)

// deviceOf is the device a file is on.
func deviceOf(fi fs.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Dev), true //nolint:unconvert // int32 on some systems
}

// allocated is the space a file takes on disk (its 512-byte blocks), which
// is what a quota counts: a sparse file takes less than its size.
func allocated(fi fs.FileInfo) uint64 {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Blocks < 0 {
		return uint64(max(fi.Size(), 0))
	}
	return uint64(st.Blocks) * 512
}
