package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/backend/loader"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

type renderOpts struct {
	profileOpts
	simulate, pluginDir, domainType string
}

func newProfileRenderCmd(getenv func(string) string) *cobra.Command {
	var o renderOpts
	cmd := &cobra.Command{
		Use:   "render-domain NAME",
		Short: "Print the libvirt domain XML a VM of this profile would get, for review",
		Long: `Prints the libvirt domain XML that pkg/hypervisor would define for a VM of the
profile, GPU hostdev included. On a simulated server (--simulate PRESET, or the
configuration's host { simulate }) the backends really create the device on a
throwaway copy of the simulated host and remove it again, so the hostdev is the
one a VM would get. On a real host nothing is created: the hostdev shows the
shape the profile's GPU kind takes, with placeholder identifiers.

The domain type is --domain-type (default kvm): gpuvmd itself uses what its
accelerator check chose on its host (qemu, software emulation, where KVM is
missing or unusable), which this command cannot know.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("%s takes one profile name, got %d arguments", cmd.CommandPath(), len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRender(cmd.Context(), o, args[0], getenv, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&o.config, "config", "", "configuration directory (default $GPUVM_CONFIG, else /etc/gpuvm)")
	cmd.Flags().StringVar(&o.simulate, "simulate", "", "render on a simulated server of this preset (default: the configuration's)")
	cmd.Flags().StringVar(&o.pluginDir, "plugin-dir", "", "directory of the gpuvm-backend-* binaries")
	cmd.Flags().StringVar(&o.domainType, "domain-type", string(domain.TypeKVM), "domain type shown: kvm, or qemu (software emulation); gpuvmd uses its accelerator check's")
	return cmd
}

func runRender(ctx context.Context, o renderOpts, name string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := loadForProfiles(o.profileOpts, getenv, stderr)
	if err != nil {
		return err
	}
	p, ok := cfg.Profiles[name]
	if !ok {
		return fmt.Errorf("no profile %q in %s%s", name, configDir(o.config, getenv), closest(name, cfg.ProfileNames()))
	}
	preset := o.simulate
	if preset == "" {
		preset = cfg.Server.Host.Simulate
	}
	vm := "preview-" + p.Name
	in := domain.Instance{
		Name: vm, UUID: uuid.NewString(), VMID: "preview", Owner: "preview", DomainType: domain.Type(o.domainType),
		GraphicsListen: cfg.Server.Libvirt.GraphicsListen, Password: "preview0",
	}
	pool := cfg.Server.Libvirt.StoragePool
	if p.Disk != nil {
		in.Disks = append(in.Disks, domain.Disk{Pool: pool, Volume: domain.OverlayName(vm), BootOrder: 1})
		in.Volumes = append(in.Volumes, domain.VolumeRef{Pool: pool, Name: domain.OverlayName(vm)})
	}
	if p.Disk != nil {
		if img := cfg.Images[p.Disk.Image]; img != nil && img.DriversISO != "" {
			in.Disks = append(in.Disks, domain.Disk{Path: img.DriversISO, CDROM: true, ReadOnly: true})
		}
	}
	if p.CloudInit != nil {
		in.Disks = append(in.Disks, domain.Disk{Pool: pool, Volume: domain.SeedName(vm), CDROM: true, ReadOnly: true})
		in.Volumes = append(in.Volumes, domain.VolumeRef{Pool: pool, Name: domain.SeedName(vm)})
	}
	note := "real host: GPU identifiers are placeholders"
	if p.GPU != nil {
		if preset != "" {
			hd, where, cleanup, err := simulatedHostdevs(ctx, o, preset, cfg, p, getenv, stderr)
			if err != nil {
				return err
			}
			defer cleanup()
			in.Hostdevs, note = hd, "simulated "+preset+": "+where
		} else {
			in.Hostdevs = placeholderHostdevs(p.GPU)
		}
	} else {
		note = "no GPU"
	}
	spec, err := domain.FromProfile(p, in)
	if err != nil {
		return fmt.Errorf("profile %s: %w", p.Name, err)
	}
	xml, err := domain.XML(spec)
	if err != nil {
		return fmt.Errorf("profile %s: %w", p.Name, err)
	}
	fmt.Fprintf(stdout, "<!-- gpuvm profile %s (%s); %s; domain type %s as asked (gpuvmd uses its accelerator check's) -->\n%s\n", p.Name, p.Source, note, spec.DomainType, strings.TrimSpace(xml))
	return nil
}

// placeholderHostdevs shows the shape of the profile's devices without a host.
func placeholderHostdevs(g *config.GPUNeed) []domain.Hostdev {
	var out []domain.Hostdev
	for i := 0; i < max(g.Count, 1); i++ {
		switch g.Kind {
		case gpu.KindPassthrough:
			out = append(out, domain.Hostdev{Type: domain.HostdevPCI, Addresses: []string{fmt.Sprintf("0000:00:%02x.0", 0x10+i)}, Managed: true})
		default:
			out = append(out, domain.Hostdev{Type: domain.HostdevMdev, UUID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), Display: true})
		}
	}
	return out
}

// simulatedHostdevs creates the profile's devices on a throwaway simulated
// host and returns their hostdevs; cleanup removes them.
func simulatedHostdevs(ctx context.Context, o renderOpts, preset string, cfg *config.Config, p *config.Profile, getenv func(string) string, stderr io.Writer) ([]domain.Hostdev, string, func(), error) {
	stateDir, err := os.MkdirTemp("", "gpuvm-render-")
	if err != nil {
		return nil, "", nil, err
	}
	dir := o.pluginDir
	if dir == "" {
		dir = getenv("GPUVM_PLUGIN_DIR")
	}
	if dir == "" {
		dir = loader.DefaultDir()
	}
	l := loader.New(loader.Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Backend: backend.Config{Simulate: preset, StateDir: stateDir, NVML: backend.NVMLAuto}})
	var made []func()
	cleanup := func() {
		for i := len(made) - 1; i >= 0; i-- {
			made[i]()
		}
		l.Close()
		os.RemoveAll(stateDir)
	}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := l.Start(startCtx); err != nil && len(l.Names()) == 0 {
		cleanup()
		return nil, "", nil, fmt.Errorf("start the backends from %s: %w", dir, err)
	}
	var out []domain.Hostdev
	var where []string
	choices, err := chooseDevices(ctx, l, cfg, p.GPU)
	if err != nil {
		cleanup()
		return nil, "", nil, fmt.Errorf("profile %s on simulated %s: %w", p.Name, preset, err)
	}
	for _, ch := range choices {
		name, req := ch.backend, ch.req
		b, ok := l.Backend(name)
		if !ok {
			cleanup()
			return nil, "", nil, fmt.Errorf("profile %s on simulated %s: backend %s is not running", p.Name, preset, name)
		}
		req.VMUUID = "00000000-0000-4000-8000-000000000000"
		d, err := b.Create(ctx, req)
		if err != nil {
			cleanup()
			return nil, "", nil, fmt.Errorf("profile %s on simulated %s: %w", p.Name, preset, err)
		}
		made = append(made, func() { _ = b.Remove(context.Background(), backend.RemoveRequest{ID: d.ID, GPU: d.GPU}) })
		h := d.Hostdev
		out = append(out, domain.Hostdev{Type: domain.HostdevType(h.Type), UUID: h.UUID, Addresses: h.Addresses, Managed: h.Managed, Display: h.Display})
		w := fmt.Sprintf("%s %s on GPU %s", name, d.Type, d.GPU)
		if d.Profile != "" {
			w = fmt.Sprintf("mig %s@%d on GPU %s", d.Profile, d.Placement, d.GPU)
		}
		where = append(where, w)
	}
	return out, strings.Join(where, ", "), cleanup, nil
}

// deviceChoice is one device to create: its backend and the request.
type deviceChoice struct {
	backend string
	req     backend.CreateRequest
}

// chooseDevices places a need on the backends' GPUs as gpuvmd's scheduler
// does (pkg/scheduler, pack placement under the configuration's GPU
// modes: a MIG instance at the start slot that keeps larger profiles
// placeable, not NVML's first fit) and returns the devices to create.
func chooseDevices(ctx context.Context, l *loader.Loader, cfg *config.Config, need *config.GPUNeed) ([]deviceChoice, error) {
	var invs []backend.Inventory
	names := l.Names()
	sort.Strings(names)
	for _, name := range names {
		b, ok := l.Backend(name)
		if !ok {
			continue
		}
		inv, err := b.Inventory(ctx)
		if err != nil {
			return nil, fmt.Errorf("inventory of backend %s: %w", name, err)
		}
		invs = append(invs, inv)
	}
	layouts := map[string][]string{}
	modes := func(address, model string) gpu.Mode {
		m, _ := gpu.ModelByName(model)
		s := cfg.Server.Host.Settings(address, m)
		layouts[address] = s.MIGLayout
		if s.Mode != "" {
			return s.Mode
		}
		return gpu.ModeAuto
	}
	spec, devices := scheduler.FromHost("preview", backend.Merge(invs), modes)
	for i := range spec.GPUs {
		spec.GPUs[i].MIGLayout = layouts[spec.GPUs[i].Address]
	}
	inv, err := scheduler.NewInventory([]scheduler.HostSpec{spec}, devices)
	if err != nil {
		return nil, fmt.Errorf("model the GPUs: %w", err)
	}
	p, why := inv.Place(policy.NeedFromProfile(need), scheduler.PlaceOptions{Strategy: scheduler.Pack, Now: time.Now()})
	if !why.OK() {
		return nil, fmt.Errorf("no GPU can take %s now: %s", describeGPU(need), why.Detail)
	}
	out := make([]deviceChoice, 0, len(p.Devices))
	for _, d := range p.Devices {
		req := backend.CreateRequest{GPU: d.GPU}
		switch d.Kind {
		case gpu.KindVGPU:
			req.Type = d.Type
		case gpu.KindMIG:
			req.Profile, req.Placement = d.Profile, d.Start
		}
		out = append(out, deviceChoice{string(d.Kind), req})
	}
	return out, nil
}
