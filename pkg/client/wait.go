package client

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// VM states in which WaitVM stops.
const (
	StateRunning = "running"
	StateFailed  = "failed"
	StateDeleted = "deleted"
)

// Settled reports whether a VM is in a state WaitVM stops at: running,
// failed or deleted.
func Settled(vm api.VM) bool {
	return vm.State == StateRunning || vm.State == StateFailed || vm.State == StateDeleted
}

// Ready reports whether a VM is in a state WaitVMReady stops at: failed,
// deleted, stopped, or running past its boot (phase not "booting": its
// guest is up, or the server's boot timeout has passed).
func Ready(vm api.VM) bool {
	if vm.State == StateRunning {
		return vm.Phase != api.PhaseBooting
	}
	return Settled(vm) || vm.State == "stopped"
}

// maxPollFailures is how many polls in a row may fail for want of an answer
// (or with 5xx) before a wait gives up.
const maxPollFailures = 5

// WaitVM waits until a VM is running, failed or deleted, and returns it as
// last seen. changed, when not nil, is called with the VM first and then
// each time its state, phase or reason changes. It follows the VM's events
// (GET /v1/events) and reads the VM when one comes, so changes show at once;
// it also reads the VM every PollMax in case the stream is quiet, and polls
// alone (from PollMin backing off to PollMax) when the server has no event
// stream. A read that gets no answer, or a 5xx, is retried (five in a row
// end the wait). The wait ends with ctx's error when ctx ends. A VM that
// failed is not an error: look at its State and Reason.
func (c *Client) WaitVM(ctx context.Context, id string, changed func(api.VM)) (*api.VM, error) {
	return c.waitVM(ctx, id, Settled, changed)
}

// WaitVMReady waits as WaitVM does, and on while a running VM boots: until
// Ready (its guest is up or the server gave up waiting for it, it failed,
// or it was stopped or deleted meanwhile).
func (c *Client) WaitVMReady(ctx context.Context, id string, changed func(api.VM)) (*api.VM, error) {
	return c.waitVM(ctx, id, Ready, changed)
}

func (c *Client) waitVM(ctx context.Context, id string, done func(api.VM) bool, changed func(api.VM)) (*api.VM, error) {
	var last *api.VM
	check := func() (bool, error) {
		vm, err := c.GetVM(ctx, id)
		if err != nil {
			return false, err
		}
		if last == nil || last.State != vm.State || last.Phase != vm.Phase || last.Reason != vm.Reason || !sameEstimate(last, vm) {
			if changed != nil {
				changed(*vm)
			}
		}
		last = vm
		return done(*vm), nil
	}
	var nudge chan struct{}
	if es, err := c.Events(ctx, EventsOptions{VM: id}); err == nil {
		defer es.Close()
		nudge = make(chan struct{}, 1)
		go func() {
			for {
				if _, err := es.Next(ctx); err != nil {
					return
				}
				select {
				case nudge <- struct{}{}:
				default:
				}
			}
		}()
	} else if ctx.Err() != nil {
		return nil, fmt.Errorf("wait for VM %s: %w", id, ctx.Err())
	}
	// Without a stream (an older server, a proxy that buffers) the wait
	// polls; a VM that does not exist shows on the first read.
	if err := c.poll(ctx, check, nudge); err != nil {
		return last, fmt.Errorf("wait for VM %s: %w", id, err)
	}
	return last, nil
}

// WaitOperation polls an operation until it is done or failed, and returns
// it as last seen; changed is called with it first and then each time its
// state or step changes. Polling is as WaitVM's. A failed operation is not
// an error: look at its State and Error.
func (c *Client) WaitOperation(ctx context.Context, id string, changed func(api.Operation)) (*api.Operation, error) {
	var last *api.Operation
	err := c.poll(ctx, func() (bool, error) {
		op, err := c.GetOperation(ctx, id)
		if err != nil {
			return false, err
		}
		if last == nil || last.State != op.State || last.Step != op.Step {
			if changed != nil {
				changed(*op)
			}
		}
		last = op
		return op.State == "done" || op.State == "failed", nil
	}, nil)
	if err != nil {
		return last, fmt.Errorf("wait for operation %s: %w", id, err)
	}
	return last, nil
}

// poll calls check until it reports done, backing off between calls. A
// receive on nudge (when not nil) calls check at once; with nudges, the
// interval is PollMax from the start: it is only the safety net.
func (c *Client) poll(ctx context.Context, check func() (bool, error), nudge <-chan struct{}) error {
	interval, maxInterval := c.PollMin, c.PollMax
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	if maxInterval < interval {
		maxInterval = interval
	}
	if nudge != nil {
		interval = maxInterval
	}
	failures := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		done, err := check()
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil && retryable(err) && failures+1 < maxPollFailures:
			failures++
		case err != nil:
			return err
		case done:
			return nil
		default:
			failures = 0
		}
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		case <-nudge:
			if !timer.Stop() {
				<-timer.C
			}
		}
		interval = min(interval+interval/2, maxInterval)
	}
}

// retryable: no answer, or a server error that may pass.
func retryable(err error) bool {
	if IsUnreachable(err) {
		return true
	}
	p, ok := AsProblem(err)
	return ok && p.Status >= 500
}

// sameEstimate reports whether two reads of a queued VM give the same
// estimated start (a new one is shown to the waiter).
func sameEstimate(a, b *api.VM) bool {
	if (a.EstimatedStart == nil) != (b.EstimatedStart == nil) || a.EstimatedStartNote != b.EstimatedStartNote {
		return false
	}
	return a.EstimatedStart == nil || a.EstimatedStart.Equal(*b.EstimatedStart)
}
