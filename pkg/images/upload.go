package images

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// Uploads are files sent through the API to import, kept in Dir while they
// arrive: one per image name, written in chunks at the offset the sender
// says, so that a sender that lost its connection asks where the file ends
// (Offset) and goes on from there. An import of the upload (ImportRequest
// .Upload) reads it like any source, checks it (SHA-256, format) and
// removes it, whatever the outcome.
type Uploads struct {
	Dir string
	// MaxBytes bounds one upload; 0: 1 TiB.
	MaxBytes int64

	mu sync.Mutex // one writer at a time per process
}

// MaxChunk bounds one chunk of an upload.
const MaxChunk = 64 << 20

// OffsetError refuses a chunk that does not start where the upload ends.
// It matches ErrInvalid.
type OffsetError struct{ Want, Got int64 }

func (e *OffsetError) Error() string {
	return fmt.Sprintf("the upload has %d bytes; a chunk at offset %d does not follow on (send from %d)", e.Want, e.Got, e.Want)
}

// Is makes an OffsetError match ErrInvalid.
func (e *OffsetError) Is(target error) bool { return target == ErrInvalid }

// ChunkError refuses a chunk whose body broke off: the sender's body ended
// or failed (a connection closed half-way, a body shorter than it said, a
// deadline) after Read of its bytes. The upload is cut back to Offset,
// where it ended before the chunk. It matches ErrInvalid: it is the
// sender's fault, and the sender sends the chunk again from Offset.
type ChunkError struct {
	Offset, Read int64
	Err          error // the body's read error
}

func (e *ChunkError) Error() string {
	return fmt.Sprintf("the chunk at offset %d broke off after %d bytes (%v); the upload still ends at %d", e.Offset, e.Read, e.Err, e.Offset)
}

func (e *ChunkError) Unwrap() error { return e.Err }

// Is makes a ChunkError match ErrInvalid.
func (e *ChunkError) Is(target error) bool { return target == ErrInvalid }

// readSide remembers a reader's error (not io.EOF) and how much it gave,
// so that a failed copy says whose fault it was.
type readSide struct {
	r   io.Reader
	n   int64
	err error
}

func (r *readSide) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

func (u *Uploads) path(name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	return filepath.Join(u.Dir, name+".part"), nil
}

// Offset is how many bytes the upload of name has; an upload not started
// (or a name no image can have) is store.ErrNotFound.
func (u *Uploads) Offset(name string) (int64, error) {
	p, err := u.path(name)
	if err != nil {
		return 0, fmt.Errorf("no upload %q: %w", name, store.ErrNotFound)
	}
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("no upload for image %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("upload %s: %w", name, err)
	}
	return st.Size(), nil
}

// Write appends a chunk, at most MaxChunk bytes of r, to the upload of name
// at offset, which must be where it ends (*OffsetError otherwise). A chunk
// that breaks off half-way (r fails: *ChunkError) or that the disk cannot
// take is cut back to what came whole. It returns the new end.
func (u *Uploads) Write(name string, offset int64, r io.Reader) (int64, error) {
	p, err := u.path(name)
	if err != nil {
		return 0, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := os.MkdirAll(u.Dir, 0o700); err != nil {
		return 0, fmt.Errorf("upload %s: %w", name, err)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("upload %s: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("upload %s: %w", name, err)
	}
	if st.Size() != offset {
		return st.Size(), &OffsetError{Want: st.Size(), Got: offset}
	}
	limit := u.MaxBytes
	if limit <= 0 {
		limit = 1 << 40
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return offset, fmt.Errorf("upload %s: %w", name, err)
	}
	room := min(int64(MaxChunk), limit-offset)
	src := &readSide{r: r}
	n, err := io.Copy(f, io.LimitReader(src, room+1))
	switch {
	case src.err != nil:
		err = &ChunkError{Offset: offset, Read: src.n, Err: src.err}
	case err == nil && n > room:
		err = fieldf("body", "the chunk is more than %d bytes, or the upload more than %d", MaxChunk, limit)
	}
	if err != nil {
		// Keep only what came before this chunk: the sender resends it.
		if terr := f.Truncate(offset); terr != nil {
			// The server's failure, whatever the chunk's was.
			return offset, fmt.Errorf("upload %s: cutting it back to %d after a failed chunk (%v): %w", name, offset, err, terr)
		}
		return offset, fmt.Errorf("upload %s: chunk at %d: %w", name, offset, err)
	}
	if err := f.Sync(); err != nil {
		return offset, fmt.Errorf("upload %s: %w", name, err)
	}
	return offset + n, nil
}

// Remove forgets the upload of name; a missing one is store.ErrNotFound.
func (u *Uploads) Remove(name string) error {
	p, err := u.path(name)
	if err != nil {
		return fmt.Errorf("no upload %q: %w", name, store.ErrNotFound)
	}
	err = os.Remove(p)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no upload for image %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("upload %s: %w", name, err)
	}
	return nil
}
