package doctor

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host"
)

// Host preparation (gpuvm admin host-prep, gpuvm-host-prep.service at every
// boot): each GPU put in the mode its host { gpu } block names, from what
// sysfs shows now, so that a second run does nothing.
//
//   - vgpu on a board whose vGPUs live on SR-IOV VFs (Ada, Hopper,
//     Blackwell; A100-class mdev on VFs): sriov-manage -e ADDR when no VF
//     is enabled;
//   - mig: nvidia-smi -i ADDR -mig 1 when MIG mode is off and the GPU holds
//     nothing; a reset it asks for is reported, never done;
//   - passthrough: the GPU and the other functions of its slot bound to
//     vfio-pci (driver_override, unbind, drivers_probe); other devices of
//     its IOMMU group are reported, never touched.
//
// Making again the devices of VMs that ran before a reboot is gpuvmd's
// reconciler's (pkg/orchestrator/hostlost.go): which VMs should run is in
// the database, which host-prep, running before gpuvmd, does not read.

// Step is one thing host-prep does, or found already done.
type Step struct {
	GPU  string   `json:"gpu"`
	What string   `json:"what"`
	Done bool     `json:"already_done,omitempty"` // nothing to do
	Path string   `json:"sysfs_path,omitempty"`   // a sysfs write …
	Data string   `json:"data,omitempty"`         // … of this
	Argv []string `json:"command,omitempty"`      // or a command
	// Note is a step host-prep will not take itself (a GPU reset, a
	// device outside the GPU's slot); Fix says how.
	Note string `json:"note,omitempty"`
}

// PrepEnv is what host-prep reads and changes.
type PrepEnv struct {
	Sys    host.SysFS
	Config *config.Config
	// MIGMode as in Env; nil or !ok: MIG GPUs are reported, not changed.
	MIGMode func(ctx context.Context, addr string) (enabled, ok bool, why string)
	// Run runs a command (sriov-manage, nvidia-smi, modprobe); nil: the
	// commands are reported and not run (a captured tree, the simulator).
	Run func(ctx context.Context, name string, args ...string) ([]byte, error)
	// Simulated: the simulator, whose sysfs has no /sys/module.
	Simulated bool
}

// Plan lists what host-prep would do now, GPU by GPU.
func Plan(ctx context.Context, e PrepEnv) ([]Step, error) {
	gpus, err := host.ListGPUs(e.Sys)
	if err != nil && len(gpus) == 0 {
		return nil, fmt.Errorf("list the GPUs: %w", err)
	}
	var steps []Step
	vfioLoaded := e.Simulated || e.Sys.Exists("module/vfio_pci")
	for _, g := range gpus {
		s := e.Config.Server.Host.Settings(g.Address, g.Model)
		switch s.Mode {
		case gpu.ModeVGPU:
			steps = append(steps, planVGPU(g))
		case gpu.ModeMIG:
			steps = append(steps, planMIG(ctx, e, g))
		case gpu.ModePassthrough:
			if !vfioLoaded {
				steps = append(steps, Step{GPU: g.Address, What: "load vfio-pci", Argv: []string{"modprobe", "vfio-pci"}})
				vfioLoaded = true
			}
			steps = append(steps, planPassthrough(e.Sys, g)...)
		default:
			steps = append(steps, Step{GPU: g.Address, What: fmt.Sprintf("mode %s: nothing to prepare", orAuto(s.Mode)), Done: true})
		}
	}
	return steps, nil
}

func planVGPU(g host.GPU) Step {
	viaVFs := g.Model.Interface() == gpu.InterfaceVendorVFIO || g.Model.MdevOnVFs()
	switch {
	case !viaVFs:
		return Step{GPU: g.Address, What: "vgpu: mdev types on the GPU itself, nothing to enable", Done: true}
	case g.NumVFs > 0:
		return Step{GPU: g.Address, What: fmt.Sprintf("vgpu: %d SR-IOV VFs enabled", g.NumVFs), Done: true}
	}
	return Step{GPU: g.Address, What: "vgpu: enable the SR-IOV VFs", Argv: []string{SRIOVManage, "-e", g.Address}}
}

func planMIG(ctx context.Context, e PrepEnv, g host.GPU) Step {
	st := Step{GPU: g.Address}
	if g.Model.MIG == nil {
		st.What, st.Note = "mig: the "+g.Model.Name+" has no MIG", "set another mode in /etc/gpuvm"
		return st
	}
	if e.MIGMode != nil {
		on, ok, why := e.MIGMode(ctx, g.Address)
		switch {
		case ok && on:
			st.What, st.Done = "mig: MIG mode on", true
			return st
		case !ok:
			st.What, st.Note = "mig: MIG mode unknown ("+why+")", fmt.Sprintf("nvidia-smi -i %s -mig 1", g.Address)
			return st
		}
	}
	if what := holds(e.Sys, g); what != "" {
		st.What, st.Note = "mig: MIG mode off, but the GPU holds "+what, "end what runs on it, then: gpuvm admin host-prep"
		return st
	}
	st.What, st.Argv = "mig: enable MIG mode", []string{"nvidia-smi", "-i", g.Address, "-mig", "1"}
	return st
}

// holds says what lives on a GPU (vGPUs on its VFs, mdevs), "" when nothing.
func holds(fsys host.SysFS, g host.GPU) string {
	n := 0
	for _, vf := range g.VFs {
		if cur, _, err := host.VFState(fsys, vf); err == nil && cur != 0 {
			n++
		}
	}
	if mdevs, err := host.ListMdevs(fsys); err == nil {
		for _, m := range mdevs {
			if m.Parent == g.Address || contains(g.VFs, m.Parent) {
				n++
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d vGPU(s)", n)
}

func planPassthrough(fsys host.SysFS, g host.GPU) []Step {
	members, _ := passthroughGroup(fsys, g)
	var out []Step
	for _, m := range members {
		d, err := host.ReadPCIDevice(fsys, m)
		if err != nil {
			out = append(out, Step{GPU: g.Address, What: "passthrough: read " + m, Note: err.Error()})
			continue
		}
		if !sameSlot(g.Address, m) {
			out = append(out, Step{GPU: g.Address, What: fmt.Sprintf("passthrough: %s (%s) shares the IOMMU group and goes to the same VM", m, orNone(d.Driver)),
				Note: "not bound by host-prep: bind it to vfio-pci yourself if it is no host device, or move the card"})
			continue
		}
		if d.Driver == "vfio-pci" {
			out = append(out, Step{GPU: g.Address, What: "passthrough: " + m + " on vfio-pci", Done: true})
			continue
		}
		if d.DriverOverride != "vfio-pci" {
			out = append(out, Step{GPU: g.Address, What: "passthrough: " + m + " reserved for vfio-pci", Path: "bus/pci/devices/" + m + "/driver_override", Data: "vfio-pci"})
		}
		if d.Driver != "" {
			out = append(out, Step{GPU: g.Address, What: "passthrough: " + m + " unbound from " + d.Driver, Path: "bus/pci/drivers/" + d.Driver + "/unbind", Data: m})
		}
		out = append(out, Step{GPU: g.Address, What: "passthrough: " + m + " bound to vfio-pci", Path: "bus/pci/drivers_probe", Data: m})
	}
	return out
}

func sameSlot(a, b string) bool {
	i, j := strings.LastIndex(a, "."), strings.LastIndex(b, ".")
	return i > 0 && j > 0 && a[:i] == b[:j]
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Outcome of one step applied.
type Outcome struct {
	Step
	Output string `json:"output,omitempty"`
	Err    string `json:"error,omitempty"`
	// ResetNeeded: the driver asks for a GPU reset, which host-prep never
	// does.
	ResetNeeded bool `json:"reset_needed,omitempty"`
}

// Apply takes the steps in order; a failed step is recorded and the others
// go on (a GPU's trouble is its own).
func Apply(ctx context.Context, e PrepEnv, steps []Step) []Outcome {
	var out []Outcome
	for _, s := range steps {
		o := Outcome{Step: s}
		switch {
		case s.Done || s.Note != "":
		case s.Path != "":
			if err := e.Sys.WriteFile(s.Path, []byte(s.Data)); err != nil {
				o.Err = err.Error()
			}
		case len(s.Argv) > 0 && e.Run == nil:
			o.Err = "not run here (a captured tree or the simulator): " + strings.Join(s.Argv, " ")
		case len(s.Argv) > 0:
			b, err := e.Run(ctx, s.Argv[0], s.Argv[1:]...)
			o.Output = strings.TrimSpace(string(b))
			if err != nil {
				o.Err = err.Error()
			}
			low := strings.ToLower(o.Output + " " + o.Err)
			if s.Argv[0] == "nvidia-smi" && (strings.Contains(low, "reset") || strings.Contains(low, "pending")) {
				o.ResetNeeded = true
				o.Note = fmt.Sprintf("MIG mode is pending: reset the GPU when nothing uses it (nvidia-smi -i %s -r, which fails while nvidia_drm is loaded) or reboot", s.GPU)
			}
		}
		out = append(out, o)
	}
	return out
}

// WriteSteps prints a plan (dry run) or its outcomes.
func WriteSteps(w io.Writer, steps []Step, outcomes []Outcome, dryRun bool) error {
	var b strings.Builder
	line := func(mark string, s Step, extra string) {
		how := ""
		switch {
		case s.Path != "":
			how = fmt.Sprintf("echo %s > /sys/%s", s.Data, s.Path)
		case len(s.Argv) > 0:
			how = strings.Join(s.Argv, " ")
		}
		fmt.Fprintf(&b, "%-9s %s  %s\n", mark, s.GPU, s.What)
		if how != "" {
			fmt.Fprintf(&b, "%-9s %s    %s\n", "", strings.Repeat(" ", len(s.GPU)), how)
		}
		if extra != "" {
			fmt.Fprintf(&b, "%-9s %s    %s\n", "", strings.Repeat(" ", len(s.GPU)), extra)
		}
	}
	todo, failed := 0, 0
	if dryRun {
		for _, s := range steps {
			switch {
			case s.Done:
				line("ok", s, "")
			case s.Note != "":
				line("attention", s, s.Note)
			default:
				todo++
				line("would", s, "")
			}
		}
		fmt.Fprintf(&b, "\nDry run: %d step(s) to take; nothing was changed.\n", todo)
	} else {
		for _, o := range outcomes {
			switch {
			case o.Done:
				line("ok", o.Step, "")
			case o.Err != "":
				failed++
				line("FAILED", o.Step, o.Err)
			case o.Note != "":
				line("attention", o.Step, o.Note)
			default:
				todo++
				line("done", o.Step, o.Output)
			}
		}
		fmt.Fprintf(&b, "\n%d step(s) taken, %d failed.\n", todo, failed)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Failed counts the outcomes that failed or need the admin (a reset).
func Failed(outcomes []Outcome) int {
	n := 0
	for _, o := range outcomes {
		if o.Err != "" || o.ResetNeeded {
			n++
		}
	}
	return n
}
