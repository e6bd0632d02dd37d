//go:build race

package simulate

// raceEnabled skips the week-long replays under the race detector, which
// makes them take minutes; the short tests run the same code.
const raceEnabled = true
