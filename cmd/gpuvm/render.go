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
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/profile"
)

type renderOpts struct {
	profileOpts
	simulate, pluginDir string
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
shape the profile's GPU kind takes, with placeholder identifiers.`,
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
		Name: vm, UUID: uuid.NewString(), VMID: "preview", Owner: "preview", DomainType: domain.TypeKVM,
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
			hd, where, cleanup, err := simulatedHostdevs(ctx, o, preset, p, getenv, stderr)
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
	fmt.Fprintf(stdout, "<!-- gpuvm profile %s (%s); %s -->\n%s\n", p.Name, p.Source, note, strings.TrimSpace(xml))
	return nil
}

// placeholderHostdevs shows the shape of the profile's devices without a host.
func placeholderHostdevs(g *profile.GPUNeed) []domain.Hostdev {
	var out []domain.Hostdev
	for i := 0; i < max(g.Count, 1); i++ {
		switch g.Kind {
		case profile.KindPassthrough:
			out = append(out, domain.Hostdev{Type: domain.HostdevPCI, Addresses: []string{fmt.Sprintf("0000:00:%02x.0", 0x10+i)}, Managed: true})
		default:
			out = append(out, domain.Hostdev{Type: domain.HostdevMdev, UUID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), Display: true})
		}
	}
	return out
}

// simulatedHostdevs creates the profile's devices on a throwaway simulated
// host and returns their hostdevs; cleanup removes them.
func simulatedHostdevs(ctx context.Context, o renderOpts, preset string, p *profile.Profile, getenv func(string) string, stderr io.Writer) ([]domain.Hostdev, string, func(), error) {
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
	for i := 0; i < max(p.GPU.Count, 1); i++ {
		name, req, err := chooseDevice(ctx, l, p.GPU)
		if err != nil {
			cleanup()
			return nil, "", nil, fmt.Errorf("profile %s on simulated %s: %w", p.Name, preset, err)
		}
		b, _ := l.Backend(name)
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

// chooseDevice picks the first GPU that can meet a need now, first fit.
// (The scheduler will choose better; this is a preview.)
func chooseDevice(ctx context.Context, l *loader.Loader, need *profile.GPUNeed) (string, backend.CreateRequest, error) {
	kinds := []string{need.Kind}
	if need.Kind == profile.KindAny {
		kinds = need.Kinds
	}
	type option struct {
		backend string
		req     backend.CreateRequest
		memory  uint64
	}
	var options []option
	for _, kind := range kinds {
		b, ok := l.Backend(kind)
		if !ok {
			continue
		}
		inv, err := b.Inventory(ctx)
		if err != nil {
			return "", backend.CreateRequest{}, err
		}
		for _, g := range inv.GPUs {
			if g.Unavailable != "" || (need.Model != "" && !strings.Contains(strings.ToLower(g.Model), strings.ToLower(need.Model))) {
				continue
			}
			switch kind {
			case profile.KindPassthrough:
				options = append(options, option{kind, backend.CreateRequest{GPU: g.Address}, g.Memory})
			case profile.KindMIG:
				for _, mp := range g.MIGProfiles {
					if len(mp.FreeStarts) > 0 && (mp.Name == need.Profile || need.Profile == "" && mp.Memory >= need.Memory) {
						options = append(options, option{kind, backend.CreateRequest{GPU: g.Address, Profile: mp.Name, Placement: mp.FreeStarts[0]}, mp.Memory})
					}
				}
			case profile.KindVGPU:
				for _, t := range g.VGPUTypes {
					if t.Available > 0 && t.MIGProfile == "" && (t.Name == need.Type || need.Type == "" && t.Memory >= need.Memory) {
						options = append(options, option{kind, backend.CreateRequest{GPU: g.Address, Type: t.Name}, t.Memory})
					}
				}
			}
		}
	}
	if len(options) == 0 {
		return "", backend.CreateRequest{}, fmt.Errorf("no GPU can take %s now", describeGPU(need))
	}
	sort.SliceStable(options, func(i, j int) bool { return options[i].memory < options[j].memory })
	return options[0].backend, options[0].req, nil
}
