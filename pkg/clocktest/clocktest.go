// Package clocktest is the fake clock of the tests: a time that moves only
// when a test moves it, safe for concurrent use.
package clocktest

import (
	"sync"
	"time"
)

// Clock is a settable clock. Its zero value reads the zero time; New starts
// it at a given instant. Every method is safe for concurrent use.
type Clock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

// New returns a clock that reads t until it is moved.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now reads the clock, then moves it on by the step (none unless SetStep).
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(c.step)
	return t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// SetStep makes every reading move the clock on by d afterwards, so that
// two readings differ (0: they do not).
func (c *Clock) SetStep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = d
}
