//go:build !unix

package quota

import "io/fs"

func deviceOf(fs.FileInfo) (uint64, bool) { return 0, false }

func allocated(fi fs.FileInfo) uint64 { return uint64(max(fi.Size(), 0)) }
