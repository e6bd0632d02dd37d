package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/backend/loader"
)

func newHostCmd(getenv func(string) string) *cobra.Command {
	host := &cobra.Command{Use: "host", Short: "Inspect this GPU server (offline, through the backend binaries)"}
	host.AddCommand(newInventoryCmd(getenv))
	return host
}

type inventoryOpts struct {
	simulate, sysfsRoot, nvml, pluginDir, stateDir string
	backends                                       []string
	json, verbose                                  bool
}

func newInventoryCmd(getenv func(string) string) *cobra.Command {
	var o inventoryOpts
	cmd := &cobra.Command{
		Use:   "inventory",
		Short: "List every GPU with its mode, vGPU types, MIG profiles and devices",
		Long: `Starts the backend binaries and prints every NVIDIA GPU they see: PCI address,
model, memory, mode, vGPU interface (mdev, vendor-vfio, passthrough-only), the
vGPU types with how many can still be created, the MIG profiles with their
free start slots, and the devices that exist. Nothing on the host is changed.

--simulate PRESET inspects a simulated server instead (presets: a100x4, a40x2,
l40sx4, h100x8, mixed); without --state-dir it starts from a fresh one.
The --json form is stable: see docs/inventory.md.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runInventory(cmd.Context(), o, getenv, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.simulate, "simulate", "", "inspect a simulated GPU server of this preset")
	f.StringVar(&o.sysfsRoot, "sysfs-root", "", "read sysfs from this directory (a captured tree) instead of /sys")
	f.StringVar(&o.nvml, "nvml", "auto", "use NVML: auto or none")
	f.StringVar(&o.pluginDir, "plugin-dir", "", "directory of the gpuvm-backend-* binaries (default: next to gpuvm, else /usr/lib/gpuvm/plugins)")
	f.StringVar(&o.stateDir, "state-dir", "", "state directory (ledgers; the simulator's state); default a temporary one")
	f.StringSliceVar(&o.backends, "backends", nil, "backends to ask (default: all found)")
	f.BoolVar(&o.json, "json", false, "print JSON (stable; see docs/inventory.md)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log what the backends do to stderr")
	return cmd
}

func runInventory(ctx context.Context, o inventoryOpts, getenv func(string) string, stdout, stderr io.Writer) error {
	if o.nvml != string(backend.NVMLAuto) && o.nvml != string(backend.NVMLNone) {
		return usageError{fmt.Errorf("--nvml must be auto or none, not %q", o.nvml)}
	}
	if o.simulate != "" && o.sysfsRoot != "" {
		return usageError{fmt.Errorf("--simulate and --sysfs-root exclude each other")}
	}
	for _, b := range o.backends {
		if !knownBackend(b) {
			return usageError{fmt.Errorf("unknown backend %q (known: %s)", b, strings.Join(backend.Names, ", "))}
		}
	}
	if o.pluginDir == "" {
		o.pluginDir = getenv("GPUVM_PLUGIN_DIR")
	}
	if o.pluginDir == "" {
		o.pluginDir = loader.DefaultDir()
	}
	if o.stateDir == "" {
		tmp, err := os.MkdirTemp("", "gpuvm-inventory-")
		if err != nil {
			return fmt.Errorf("create a temporary state directory: %w", err)
		}
		defer os.RemoveAll(tmp)
		o.stateDir = tmp
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	l := loader.New(loader.Config{
		Dir: o.pluginDir, Enabled: o.backends, Logger: log,
		Backend: backend.Config{SysFSRoot: o.sysfsRoot, Simulate: o.simulate, StateDir: o.stateDir, NVML: backend.NVMLMode(o.nvml)},
	})
	defer l.Close()
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	startErr := l.Start(startCtx)
	names := l.Names()
	if len(names) == 0 {
		if startErr != nil {
			return fmt.Errorf("no backend started from %s: %w", o.pluginDir, startErr)
		}
		return fmt.Errorf("no backend binaries (%s*) found in %s", backend.BinaryPrefix, o.pluginDir)
	}
	var invs []backend.Inventory
	var notes []string
	if startErr != nil {
		notes = append(notes, startErr.Error())
	}
	for _, name := range names {
		b, _ := l.Backend(name)
		callCtx, cancel := context.WithTimeout(ctx, time.Minute)
		inv, err := b.Inventory(callCtx)
		cancel()
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: inventory failed: %v", name, err))
			continue
		}
		invs = append(invs, inv)
	}
	hi := api.FromHost(backend.Merge(invs))
	hi.Notes = append(hi.Notes, notes...)
	if hi.Host == "" {
		hi.Host = describeTarget(o)
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(hi)
	}
	return printInventory(stdout, hi)
}

func describeTarget(o inventoryOpts) string {
	switch {
	case o.simulate != "":
		return "simulated GPU server (preset " + o.simulate + ")"
	case o.sysfsRoot != "":
		return "sysfs tree at " + o.sysfsRoot
	}
	return "/sys"
}

func knownBackend(name string) bool {
	for _, n := range backend.Names {
		if n == name {
			return true
		}
	}
	return false
}

func gib(b uint64) string {
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%dGiB", b>>30)
	}
	return fmt.Sprintf("%dMiB", b>>20)
}

func printInventory(w io.Writer, hi api.HostInventory) error {
	title := "Host: " + hi.Host
	if hi.Simulated {
		title += "  [SIMULATED: no real GPU was touched]"
	}
	fmt.Fprintln(w, title)
	fmt.Fprintf(w, "Backends: %s\n", strings.Join(hi.Backends, ", "))
	if d := hi.Driver; d != nil {
		if d.VGPUMax != "" {
			fmt.Fprintf(w, "Driver: %s (vGPU manager: guest drivers of vGPU %s to %s)\n", d.Version, d.VGPUMin, d.VGPUMax)
		} else {
			fmt.Fprintf(w, "Driver: %s\n", d.Version)
		}
	}
	for _, n := range hi.Notes {
		fmt.Fprintln(w, "Note:", n)
	}
	if len(hi.GPUs) == 0 {
		fmt.Fprintln(w, "\nNo NVIDIA GPU found.")
	}
	for _, g := range hi.GPUs {
		fmt.Fprintf(w, "\nGPU %s  %s  %s  NUMA %d  driver %s\n", g.Address, g.Model, gib(g.Memory), g.NUMANode, orDash(g.Driver))
		fmt.Fprintf(w, "  mode %s, interface %s", g.Mode, g.Interface)
		if g.MIGCapable {
			fmt.Fprintf(w, ", MIG %s", onOff(g.MIGEnabled))
		}
		if g.MixedSize {
			fmt.Fprint(w, ", mixed-size vGPU")
		}
		if g.IOMMUGroup != "" {
			fmt.Fprintf(w, ", IOMMU group %s", g.IOMMUGroup)
			if len(g.GroupDevices) > 0 {
				fmt.Fprintf(w, " (with %s)", strings.Join(g.GroupDevices, ", "))
			}
		}
		fmt.Fprintln(w)
		names := make([]string, 0, len(g.Backends))
		for b := range g.Backends {
			names = append(names, b)
		}
		sort.Strings(names)
		for _, b := range names {
			if why := g.Backends[b]; why != "" {
				fmt.Fprintf(w, "  %-12s unavailable: %s\n", b+":", why)
			} else {
				fmt.Fprintf(w, "  %-12s ready\n", b+":")
			}
		}
		if len(g.VGPUTypes) > 0 {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  vGPU type\tmemory\tmax\tavailable\tMIG profile\thost id")
			for _, t := range g.VGPUTypes {
				fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%s\n", t.Name, gib(t.Memory), t.MaxInstances, t.Available, orDash(t.MIGProfile), t.ID)
			}
			tw.Flush()
		}
		if len(g.MIGProfiles) > 0 {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  MIG profile\tid\tslices\tmemory\tmax\tfree start slots")
			for _, p := range g.MIGProfiles {
				fmt.Fprintf(tw, "  %s\t%d\t%dg/%d mem\t%s\t%d\t%s\n", p.Name, p.ID, p.Slices, p.Size, gib(p.Memory), p.Max, startsText(p.FreeStarts))
			}
			tw.Flush()
		}
	}
	fmt.Fprintf(w, "\nDevices: %d\n", len(hi.Devices))
	if len(hi.Devices) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  id\tbackend\tGPU\ttype\tVM\tmanaged")
		for _, d := range hi.Devices {
			typ := d.Type
			if d.Profile != "" {
				typ += fmt.Sprintf(" (%s@%d, GI %d)", d.Profile, *d.Placement, *d.GPUInstance)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%v\n", d.ID, d.Backend, d.GPU, orDash(typ), orDash(d.VMUUID), d.Managed)
		}
		tw.Flush()
	}
	return nil
}

func startsText(s []int) string {
	if len(s) == 0 {
		return "none"
	}
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
