package simulate

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// loadExample reads an example cluster and trace of test/traces, with the
// default maximum wait of an hour.
func loadExample(t testing.TB, cluster, trace string) (Setup, *Trace) {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "test", "traces")
	src, err := os.ReadFile(filepath.Join(dir, cluster))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCluster(cluster, src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, trace))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := ParseTrace(f, TraceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return Setup{Cluster: c, MaxWait: time.Hour}, tr
}
