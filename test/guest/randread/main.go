// Command gpuvm-randread measures random reads from inside a guest (test/e2e's
// home I/O benchmark copies it into the guest through the owner's home):
//
//	gpuvm-randread FILE MIB SECONDS
//
// makes FILE of MIB mebibytes of random bytes when it is not that size
// (flushed), then reads 4 KiB blocks at random 4 KiB-aligned offsets for
// SECONDS, one at a time, with O_DIRECT when the file system takes it (the
// guest's page cache is then out of the way), and prints key=value lines:
// direct (yes or no), reads, iops, p50_us and p99_us.
package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"
)

const block = 4096

func main() {
	if err := run(os.Stdout, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpuvm-randread:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, args []string) error {
	if len(args) != 3 {
		return errors.New("usage: gpuvm-randread FILE MIB SECONDS")
	}
	mib, err1 := strconv.Atoi(args[1])
	secs, err2 := strconv.Atoi(args[2])
	if err1 != nil || err2 != nil || mib < 1 || secs < 1 {
		return fmt.Errorf("MIB and SECONDS are whole numbers of at least 1, not %q and %q", args[1], args[2])
	}
	size := int64(mib) << 20
	if err := fill(args[0], size); err != nil {
		return err
	}
	direct := "yes"
	fd, err := syscall.Open(args[0], syscall.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		direct = "no"
		if fd, err = syscall.Open(args[0], syscall.O_RDONLY, 0); err != nil {
			return fmt.Errorf("open %s: %w", args[0], err)
		}
	}
	defer syscall.Close(fd)
	// O_DIRECT wants a buffer aligned to the block: an anonymous mapping is.
	buf, err := syscall.Mmap(-1, 0, block, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("map a buffer: %w", err)
	}
	blocks := size / block
	var lat []time.Duration
	end := time.Now().Add(time.Duration(secs) * time.Second)
	start := time.Now()
	for time.Now().Before(end) {
		off := mrand.Int64N(blocks) * block
		t := time.Now()
		n, err := syscall.Pread(fd, buf, off)
		if err != nil || n != block {
			return fmt.Errorf("read %d bytes at %d: %d, %v", block, off, n, err)
		}
		lat = append(lat, time.Since(t))
	}
	took := time.Since(start)
	slices.Sort(lat)
	fmt.Fprintf(w, "direct=%s\nreads=%d\niops=%.0f\np50_us=%d\np99_us=%d\n", direct, len(lat), float64(len(lat))/took.Seconds(),
		lat[len(lat)/2].Microseconds(), lat[len(lat)*99/100].Microseconds())
	return nil
}

// fill makes path size bytes of random data, flushed, unless it is that
// size already.
func fill(path string, size int64) error {
	if fi, err := os.Stat(path); err == nil && fi.Size() == size {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	chunk := make([]byte, 1<<20)
	for written := int64(0); written < size; written += int64(len(chunk)) {
		_, _ = rand.Read(chunk)
		if _, err := f.Write(chunk); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("flush %s: %w", path, err)
	}
	return f.Close()
}
