package clocktest

import (
	"sync"
	"testing"
	"time"
)

var start = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func TestClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		move func(c *Clock)
		want []time.Time // successive readings
	}{
		{"still", func(*Clock) {}, []time.Time{start, start}},
		{"advance", func(c *Clock) { c.Advance(time.Hour) }, []time.Time{start.Add(time.Hour), start.Add(time.Hour)}},
		{"set", func(c *Clock) { c.Set(start.Add(-time.Minute)) }, []time.Time{start.Add(-time.Minute), start.Add(-time.Minute)}},
		{"step", func(c *Clock) { c.SetStep(time.Millisecond) }, []time.Time{start, start.Add(time.Millisecond), start.Add(2 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(start)
			tc.move(c)
			for i, want := range tc.want {
				if got := c.Now(); !got.Equal(want) {
					t.Fatalf("reading %d: %v, want %v", i, got, want)
				}
			}
		})
	}
}

// TestClockConcurrent moves and reads the clock from many goroutines; under
// -race it proves the clock safe for concurrent use, and the sum of the moves
// is where it ends.
func TestClockConcurrent(t *testing.T) {
	c := New(start)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Second)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(800*time.Second); !got.Equal(want) {
		t.Fatalf("after 800 advances of a second: %v, want %v", got, want)
	}
}
