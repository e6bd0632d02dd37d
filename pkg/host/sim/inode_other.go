//go:build !unix

package sim

import "os"

// inode is 0 where the file system gives none: the state file's stamp then
// rests on its size and modification time.
func inode(os.FileInfo) uint64 { return 0 }
