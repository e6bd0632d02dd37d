//go:build !unix

package homes

import "io/fs"

// ownerOf: where files have no uid (the CLI built for Windows reads this
// package's checks), none is known.
func ownerOf(fs.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }
