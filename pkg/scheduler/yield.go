package scheduler

import (
	"runtime"
	"time"
)

// YieldEvery is how long a long computation (a cycle over thousands of
// queued requests, the estimates' replay of them all) runs before it lets
// the process's other goroutines have the CPU. Go's scheduler has no
// priorities: the API's requests, waiting for a processor behind such a
// computation, would otherwise wait for Go's 10 ms preemption each time
// (issue #26).
const YieldEvery = time.Millisecond

// Yielder lets other goroutines run (runtime.Gosched) once YieldEvery has
// passed since it last did. One per computation: it is not safe for
// concurrent use.
type Yielder struct{ last time.Time }

// NewYielder starts counting now.
func NewYielder() Yielder { return Yielder{last: time.Now()} }

// Maybe yields when YieldEvery has passed since the last yield.
func (y *Yielder) Maybe() {
	if time.Since(y.last) >= YieldEvery {
		runtime.Gosched()
		y.last = time.Now()
	}
}
