package simulate

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"text/tabwriter"
	"time"
)

// TaskDraw is how a trace is replayed as tasks (docs/tasks.md): a task's
// VM is deleted when its command ends, so each request's real run is drawn,
// uniformly and seeded, from Min to Max of the time it asked for (its
// lease), and its GPU is given back then. The scheduler still sees the
// asked time (the lease) as the end, as gpuvmd does.
type TaskDraw struct {
	Seed uint64 `json:"seed"`
	// Min and Max are fractions of the lease, 0 < Min ≤ Max ≤ 1.
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// DefaultTaskDraw is the usual case of issue 28: the real run is 20–100 %
// of the time asked for.
var DefaultTaskDraw = TaskDraw{Seed: 1, Min: 0.2, Max: 1}

// Validate says what is wrong with a draw, naming the field.
func (d TaskDraw) Validate() error {
	if !(d.Min > 0 && d.Min <= 1) {
		return fmt.Errorf("task draw: min %g is not a fraction of the lease in (0, 1]", d.Min)
	}
	if !(d.Max >= d.Min && d.Max <= 1) {
		return fmt.Errorf("task draw: max %g is not from min (%g) to 1", d.Max, d.Min)
	}
	return nil
}

// AsTasks is a copy of tr in which each request runs a drawn part of its
// lease (Item.Runtime), at least a second; the same draw of the same trace
// gives the same runs. The trace's own runtime column is replaced.
func AsTasks(tr *Trace, d TaskDraw) (*Trace, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	out := copyTrace(tr)
	rng := rand.New(rand.NewPCG(d.Seed, 0x7a5c))
	for i := range out.Items {
		it := &out.Items[i]
		f := d.Min + (d.Max-d.Min)*rng.Float64()
		it.Runtime = max(time.Second, time.Duration(f*float64(it.Request.Lease)).Round(time.Second))
		it.Runtime = min(it.Runtime, it.Request.Lease)
	}
	return out, nil
}

// AsVMs is a copy of tr in which every request holds its devices for its
// whole lease, as a VM that is not deleted early does.
func AsVMs(tr *Trace) *Trace {
	out := copyTrace(tr)
	for i := range out.Items {
		out.Items[i].Runtime = out.Items[i].Request.Lease
	}
	return out
}

func copyTrace(tr *Trace) *Trace {
	return &Trace{Items: append([]Item(nil), tr.Items...), Bad: tr.Bad, Start: tr.Start}
}

// TaskComparison is one spec's replay of a trace as VMs held to their
// lease and as tasks that give their GPU back when their run ends.
type TaskComparison struct {
	Spec    string   `json:"run"`
	Draw    TaskDraw `json:"draw"`
	Largest string   `json:"largest"`
	VMs     TaskSide `json:"vms"`
	Tasks   TaskSide `json:"tasks"`
}

// TaskSide is what one side of a TaskComparison served.
type TaskSide struct {
	// GivenBackGPUHours is GPU-hours granted but not used: Σ over the
	// started requests of share × (lease − held).
	GivenBackGPUHours float64 `json:"given_back_gpu_hours"`
	GrantedGPUHours   float64 `json:"granted_gpu_hours"`
	UsedGPUHours      float64 `json:"used_gpu_hours"`
	Accepted          int     `json:"accepted"`
	Requests          int     `json:"requests"`
	MeanWaitMin       float64 `json:"mean_wait_minutes"`
	P90WaitMin        float64 `json:"p90_wait_minutes"`
	// LargestAccepted of LargestRequested: the largest type's requests
	// started within the maximum wait (the report's acceptance).
	LargestAccepted  int     `json:"largest_accepted"`
	LargestRequested int     `json:"largest_requested"`
	Utilization      float64 `json:"utilization"`
	Result           *Result `json:"-"`
}

// CompareTasks replays tr under spec twice: as VMs (AsVMs) and as tasks
// (AsTasks with d).
func CompareTasks(setup Setup, tr *Trace, spec Spec, d TaskDraw) (*TaskComparison, error) {
	tasks, err := AsTasks(tr, d)
	if err != nil {
		return nil, err
	}
	vr, err := Run(setup, AsVMs(tr), spec)
	if err != nil {
		return nil, fmt.Errorf("run %s as VMs: %w", spec.Name, err)
	}
	tk, err := Run(setup, tasks, spec)
	if err != nil {
		return nil, fmt.Errorf("run %s as tasks: %w", spec.Name, err)
	}
	c := &TaskComparison{Spec: spec.Name, Draw: d}
	if len(vr.Types) > 0 {
		c.Largest = vr.Types[0].Key // sorted by share, largest first
	}
	c.VMs, c.Tasks = side(vr, c.Largest), side(tk, c.Largest)
	return c, nil
}

func side(r *Result, largest string) TaskSide {
	s := TaskSide{GrantedGPUHours: r.GPUHoursGranted, UsedGPUHours: r.GPUHoursServed, GivenBackGPUHours: round(r.GPUHoursGranted-r.GPUHoursServed, 2),
		Accepted: r.Accepted, Requests: r.Requests, MeanWaitMin: r.MeanWaitMin, P90WaitMin: r.P90WaitMin, Utilization: r.Utilization, Result: r}
	if t := r.TypeOf(largest); t != nil {
		s.LargestAccepted, s.LargestRequested = t.Accepted, t.Requested
	}
	return s
}

// LargestAcceptance is the share of the largest type's requests started
// within the maximum wait.
func (s TaskSide) LargestAcceptance() float64 {
	return safeDiv(float64(s.LargestAccepted), float64(s.LargestRequested))
}

// TaskReport compares runs of one trace as VMs and as tasks (gpuvm sim
// --as-tasks).
type TaskReport struct {
	Trace      string            `json:"trace"`
	Cluster    string            `json:"cluster"`
	Requests   int               `json:"requests"`
	MaxWaitSec int64             `json:"max_wait_seconds"`
	Draw       TaskDraw          `json:"draw"`
	Largest    string            `json:"largest"`
	Runs       []*TaskComparison `json:"runs"`
}

// CompareAsTasks replays tr under every spec as VMs and as tasks (each
// side's runs side by side, as Compare does).
func CompareAsTasks(setup Setup, tr *Trace, specs []Spec, d TaskDraw) (*TaskReport, error) {
	tasks, err := AsTasks(tr, d)
	if err != nil {
		return nil, err
	}
	vms, err := Compare(setup, AsVMs(tr), specs)
	if err != nil {
		return nil, fmt.Errorf("as VMs: %w", err)
	}
	tks, err := Compare(setup, tasks, specs)
	if err != nil {
		return nil, fmt.Errorf("as tasks: %w", err)
	}
	rep := &TaskReport{Requests: len(tr.Items), MaxWaitSec: int64(setup.MaxWait / time.Second), Draw: d, Largest: vms.Largest}
	for i, s := range specs {
		rep.Runs = append(rep.Runs, &TaskComparison{Spec: s.Name, Draw: d, Largest: vms.Largest,
			VMs: side(vms.Runs[i], vms.Largest), Tasks: side(tks.Runs[i], vms.Largest)})
	}
	return rep, nil
}

// WriteText writes the report for people: per run, VMs → tasks.
func (r *TaskReport) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "Trace %s on %s: %d requests replayed as VMs that hold their lease and as tasks whose run is drawn from %.0f–%.0f %% of it (seed %d)",
		r.Trace, r.Cluster, r.Requests, 100*r.Draw.Min, 100*r.Draw.Max, r.Draw.Seed)
	if r.MaxWaitSec > 0 {
		fmt.Fprintf(w, "; a request not started within %s is refused", time.Duration(r.MaxWaitSec)*time.Second)
	}
	fmt.Fprint(w, "\n\nVMs → tasks\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"run", "GPU-h given back early", "GPU-h used", "wait mean (min)", "wait p90 (min)", "accepted"}
	if r.Largest != "" {
		head = append(head, r.Largest+" accepted")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, c := range r.Runs {
		v, k := c.VMs, c.Tasks
		cells := []string{c.Spec,
			fmt.Sprintf("%.1f → %.1f", v.GivenBackGPUHours, k.GivenBackGPUHours),
			fmt.Sprintf("%.1f → %.1f", v.UsedGPUHours, k.UsedGPUHours),
			fmt.Sprintf("%.1f → %.1f", v.MeanWaitMin, k.MeanWaitMin),
			fmt.Sprintf("%.1f → %.1f", v.P90WaitMin, k.P90WaitMin),
			fmt.Sprintf("%d → %d", v.Accepted, k.Accepted)}
		if r.Largest != "" {
			cells = append(cells, fmt.Sprintf("%.1f%% → %.1f%%", 100*v.LargestAcceptance(), 100*k.LargestAcceptance()))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nGiven back early: GPU-hours granted to the started requests (share × lease) but not held. As VMs only preemptions and window stops give any back.")
	return nil
}
