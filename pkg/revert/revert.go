// Package revert undoes a change made in several steps when a later step
// fails: each step that succeeds registers how to undo it, and unless the
// change as a whole succeeds the undo steps run, last first.
//
//	var r revert.Reverter
//	defer r.Revert() // nothing once Success was called
//	make A; r.Add(undoA)
//	make B; r.Add(undoB)
//	r.Success()
//
// It is used by the backends (plugins/internal/kit), the hypervisor's
// CreateVM and the orchestrator's create rollback. A Reverter is not safe
// for concurrent use.
package revert

import "errors"

// Reverter collects undo steps and runs them in reverse unless the change
// succeeded. The zero value is ready.
type Reverter struct {
	steps []step
}

type step struct {
	what string // "" for a step Unwind does not name
	undo func() error
}

// Add registers an undo step.
func (r *Reverter) Add(undo func() error) { r.AddNamed("", undo) }

// AddNamed registers an undo step named by what it removes ("volume
// x.qcow2"): Unwind lists it as undone or left.
func (r *Reverter) AddNamed(what string, undo func() error) {
	r.steps = append(r.steps, step{what: what, undo: undo})
}

// Success drops the undo steps: the change stands.
func (r *Reverter) Success() { r.steps = nil }

// Revert runs the undo steps, last first, each once, and returns the
// errors of those that failed, joined (nil if none did).
func (r *Reverter) Revert() error { return r.Unwind().Err() }

// RevertUntilFailure runs the undo steps, last first, until one fails, and
// returns that step's error: each step runs only once every step
// registered after it is undone (a device goes only once no domain holds
// it). The steps are dropped either way, so that a rollback whose steps
// are idempotent is run again from the start.
func (r *Reverter) RevertUntilFailure() error {
	steps := r.steps
	r.steps = nil
	for i := len(steps) - 1; i >= 0; i-- {
		if err := steps[i].undo(); err != nil {
			return err
		}
	}
	return nil
}

// Result is what an Unwind did.
type Result struct {
	// Undone and Left are the named steps that succeeded and that failed,
	// in the order they ran.
	Undone, Left []string
	// Errs are the errors of the steps that failed, named or not.
	Errs []error
}

// Err is the errors of the steps that failed, joined.
func (res Result) Err() error { return errors.Join(res.Errs...) }

// Unwind is Revert, saying what it undid and what it left.
func (r *Reverter) Unwind() Result {
	var res Result
	steps := r.steps
	r.steps = nil
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		err := s.undo()
		if err != nil {
			res.Errs = append(res.Errs, err)
		}
		switch {
		case s.what == "":
		case err != nil:
			res.Left = append(res.Left, s.what)
		default:
			res.Undone = append(res.Undone, s.what)
		}
	}
	return res
}
