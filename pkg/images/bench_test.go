package images

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkImport streams a 64 MiB raw file of random bytes into the pool
// through libvirt (hashing it, qemu-img info before and after) and deletes
// it again; b.SetBytes makes go test report the throughput.
func BenchmarkImport(b *testing.B) {
	src := filepath.Join(b.TempDir(), "disk.raw")
	data := make([]byte, 64<<20)
	_, _ = rand.Read(data)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		b.Fatal(err)
	}
	e := newEnv(b)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("bench-%d", i)
		if _, err := e.m.Import(e.ctx, ImportRequest{Source: src, Name: name, OS: "linux", By: "bench"}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := e.m.Delete(e.ctx, name, 0); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
