package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestCommittedTracesAreGenerated: the traces in test/traces are exactly
// what the generator writes (run `go run ./test/traces/gen -out
// test/traces` after changing a distribution).
func TestCommittedTracesAreGenerated(t *testing.T) {
	for _, sp := range specs {
		want, err := os.ReadFile(filepath.Join("..", sp.file))
		if err != nil {
			t.Fatal(err)
		}
		if got := generate(sp); !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the generator writes: regenerate it", sp.file)
		}
		if a, b := generate(sp), generate(sp); !bytes.Equal(a, b) {
			t.Errorf("%s: two runs of the generator differ", sp.file)
		}
	}
}

func TestRateShape(t *testing.T) {
	if m := meanRate(); m < 0.4 || m > 0.5 {
		t.Errorf("mean rate %g", m)
	}
	if rate(9.5*3600) != 1 || rate(3*3600) != 0.35 || rate(5*86400+12*3600) != 0.25 {
		t.Error("diurnal curve")
	}
}
