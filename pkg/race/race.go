//go:build race

// Package race says whether this binary was built with the race detector.
// Tests of single-goroutine computations that it slows tenfold skip under
// it; make test runs them again without it.
package race

// Enabled is true in a binary built with -race.
const Enabled = true
