package monitor

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// IdleDetector tells how long running VMs have left their GPUs idle: what
// the lease code reads to stop VMs that hold a GPU others wait for.
type IdleDetector interface {
	IdleVMs(ctx context.Context) ([]VMIdle, error)
}

// VMIdle is how long a running VM's GPU devices have all been under the
// idle threshold.
type VMIdle struct {
	VMID  string
	Name  string
	Owner string
	// Since is when the idle stretch began: the last sample at or above
	// the threshold, or when the VM last changed state (started, was
	// extended), whichever is later.
	Since time.Time
	// For is how long until now; 0 when the VM's last sample was busy.
	For time.Duration
	// LastSample is the VM's newest sample that reported a utilisation.
	LastSample time.Time
}

// IdleStore is what idle detection reads (a *store.Store).
type IdleStore interface {
	store.VMLister // the running VMs (store.AllVMs)
	ListVMActivity(ctx context.Context, vmIDs []string, since time.Time, busy float64) (map[string]store.VMActivity, error)
}

// Idle finds idle VMs from their raw samples (so an idle stretch is
// measured at most over the raw retention).
type Idle struct {
	st    IdleStore
	host  string
	clock Clock
	// threshold is the busy utilisation ratio; stale how old a VM's last
	// sample may be for its idleness to be known.
	threshold float64
	stale     time.Duration
}

// NewIdle detects idle VMs of host: a VM is busy in a sample when its
// device's utilisation is at least thresholdPercent, and its samples are
// current when the newest is younger than three sampling intervals.
func NewIdle(st IdleStore, host string, thresholdPercent float64, interval time.Duration, clock Clock) *Idle {
	if clock == nil {
		clock = realClock{}
	}
	return &Idle{st: st, host: host, clock: clock, threshold: thresholdPercent / 100, stale: 3 * interval}
}

var _ IdleDetector = (*Idle)(nil)

// IdleVMs lists the running VMs of the host whose GPU devices are sampled,
// with how long they have been idle, longest first. VMs whose devices
// report no utilisation (MIG instances without GPM, GPUs the host cannot
// see) or have no current samples are left out: their idleness is not
// known.
func (d *Idle) IdleVMs(ctx context.Context) ([]VMIdle, error) {
	now := d.clock.Now().UTC()
	vms, err := store.AllVMs(ctx, d.st, store.VMFilter{States: []string{store.VMRunning}, Host: d.host})
	if err != nil {
		return nil, fmt.Errorf("idle VMs: list the running VMs: %w", err)
	}
	if len(vms) == 0 {
		return nil, nil
	}
	ids := make([]string, len(vms))
	since := now
	for i, vm := range vms {
		ids[i] = vm.ID
		if vm.UpdatedAt.Before(since) {
			since = vm.UpdatedAt
		}
	}
	act, err := d.st.ListVMActivity(ctx, ids, since, d.threshold)
	if err != nil {
		return nil, fmt.Errorf("idle VMs: %w", err)
	}
	var out []VMIdle
	for _, vm := range vms {
		a, ok := act[vm.ID]
		if !ok || a.Last.Before(vm.UpdatedAt) || now.Sub(a.Last) > d.stale {
			continue
		}
		v := VMIdle{VMID: vm.ID, Name: vm.Name, Owner: vm.Owner, LastSample: a.Last}
		switch {
		case !a.LastBusy.IsZero() && !a.LastBusy.Before(a.Last):
			v.Since = a.Last // busy in its last sample
		case a.LastBusy.After(vm.UpdatedAt):
			v.Since = a.LastBusy
		default:
			v.Since = vm.UpdatedAt
		}
		if v.Since.Before(a.Last) {
			v.For = now.Sub(v.Since)
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].For != out[j].For {
			return out[i].For > out[j].For
		}
		return out[i].VMID < out[j].VMID
	})
	return out, nil
}
