package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
)

func newProfileCmd(getenv func(string) string) *cobra.Command {
	c := &cobra.Command{Use: "profile", Short: "Show the profiles of a configuration (offline, on the files)"}
	c.AddCommand(newProfileListCmd(getenv), newProfileShowCmd(getenv), newProfileRenderCmd(getenv))
	return c
}

type profileOpts struct {
	config string
	json   bool
}

func (o *profileOpts) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.config, "config", "", "configuration directory (default $GPUVM_CONFIG, else /etc/gpuvm)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON: sizes in bytes, durations in seconds (see docs/config.md)")
}

func newProfileListCmd(getenv func(string) string) *cobra.Command {
	var o profileOpts
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the profiles, resolved: defaults filled in",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadForProfiles(o, getenv, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ps := cfg.SortedProfiles()
			if o.json {
				return writeJSON(cmd.OutOrStdout(), ps)
			}
			return printProfileList(cmd.OutOrStdout(), ps)
		},
	}
	o.flags(cmd)
	return cmd
}

func newProfileShowCmd(getenv func(string) string) *cobra.Command {
	var o profileOpts
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show one profile, resolved: defaults filled in",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("%s takes one profile name, got %d arguments", cmd.CommandPath(), len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadForProfiles(o, getenv, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			p, ok := cfg.Profiles[args[0]]
			if !ok {
				return fmt.Errorf("no profile %q in %s%s", args[0], configDir(o.config, getenv), closest(args[0], cfg.ProfileNames()))
			}
			if o.json {
				return writeJSON(cmd.OutOrStdout(), p)
			}
			return printProfile(cmd.OutOrStdout(), cfg, p)
		},
	}
	o.flags(cmd)
	return cmd
}

// loadForProfiles loads the configuration; diagnostics go to stderr. A
// configuration with errors is no configuration.
func loadForProfiles(o profileOpts, getenv func(string) string, stderr io.Writer) (*config.Config, error) {
	dir := configDir(o.config, getenv)
	l := new(config.Loader)
	cfg, diags := l.LoadDir(dir)
	if err := l.WriteDiagnostics(stderr, diags, 0); err != nil {
		return nil, err
	}
	if diags.HasErrors() {
		errs, _ := count(diags)
		fmt.Fprintf(stderr, "gpuvm: the configuration in %s has %s (gpuvm config validate %s)\n", dir, plural(errs, "error"), dir)
		return nil, exitError{exitFailure}
	}
	return cfg, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// closest suggests the nearest names (by shared prefix or containment).
func closest(name string, names []string) string {
	var near []string
	for _, n := range names {
		if strings.Contains(n, name) || strings.Contains(name, n) || (len(name) >= 2 && strings.HasPrefix(n, name[:2])) {
			near = append(near, n)
		}
	}
	if len(near) == 0 {
		near = names
	}
	if len(near) == 0 {
		return " (it has no profiles)"
	}
	sort.Strings(near)
	return " (profiles: " + strings.Join(near, ", ") + ")"
}

func describeGPU(g *config.GPUNeed) string {
	if g == nil {
		return "-"
	}
	var s string
	switch g.Kind {
	case gpu.KindVGPU:
		s = "vGPU " + g.Type
	case gpu.KindMIG:
		s = "MIG " + g.Profile
		if g.Model != "" {
			s += " on " + g.Model
		}
	case gpu.KindPassthrough:
		s = "whole GPU"
		if g.Model != "" {
			s = "whole " + g.Model
		}
	default:
		s = "≥" + config.FormatSize(g.Memory) + " " + strings.Join(gpu.KindNames(g.Kinds), "|")
		if g.Series != "" {
			s += " (" + g.Series + ")"
		}
	}
	if g.Count > 1 {
		s = fmt.Sprintf("%d× %s", g.Count, s)
	}
	return s
}

func describeDisk(p *config.Profile) string {
	switch {
	case p.Disk != nil && p.Disk.Size > 0:
		return p.Disk.Image + " " + config.FormatSize(p.Disk.Size)
	case p.Disk != nil:
		return p.Disk.Image
	case p.Boot != nil:
		return "kernel boot"
	}
	return "-"
}

func printProfileList(w io.Writer, ps []*config.Profile) error {
	if len(ps) == 0 {
		_, err := fmt.Fprintln(w, "No profiles.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tGPU\tVCPUS\tMEMORY\tDISK\tCLASS\tLEASE\tDESCRIPTION")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s/%s\t%s\n", p.Name, describeGPU(p.GPU), p.VCPUs,
			config.FormatSize(p.Memory), describeDisk(p), p.Class,
			config.FormatDuration(p.Lease.Default), config.FormatDuration(p.Lease.Max), p.Description)
	}
	return tw.Flush()
}

func printProfile(w io.Writer, cfg *config.Config, p *config.Profile) error {
	fmt.Fprintf(w, "Profile %s (%s)\n", p.Name, p.Source)
	if p.Description != "" {
		fmt.Fprintf(w, "  %s\n", p.Description)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	tpm := "no TPM"
	if p.TPM {
		tpm = "TPM 2.0"
	}
	fmt.Fprintf(tw, "  VM:\t%s, %s memory, %s, %s firmware, %s\n", plural(p.VCPUs, "vCPU"), config.FormatSize(p.Memory), p.OS, p.Firmware, tpm)
	if d := p.Disk; d != nil {
		src := ""
		if img := cfg.Images[d.Image]; img != nil {
			src = img.Path
			if img.Volume != "" {
				src = "volume " + img.Volume + " in pool " + img.Pool
			}
			if img.Imported != "" {
				src = "imported image " + img.Imported + " (newest)"
				if img.Version > 0 {
					src = fmt.Sprintf("imported image %s@%d", img.Imported, img.Version)
				}
			}
		}
		size := "the image's size"
		if d.Size > 0 {
			size = config.FormatSize(d.Size)
		}
		fmt.Fprintf(tw, "  Disk:\toverlay on image %s (%s), %s\n", d.Image, src, size)
	}
	if b := p.Boot; b != nil {
		fmt.Fprintf(tw, "  Boot:\tkernel %s\n", b.Kernel)
		if b.Initrd != "" {
			fmt.Fprintf(tw, "\tinitrd %s\n", b.Initrd)
		}
		if b.Cmdline != "" {
			fmt.Fprintf(tw, "\tcmdline %q\n", b.Cmdline)
		}
	}
	desc := "none"
	if g := p.GPU; g != nil {
		desc = describeGPU(g)
		if g.Kind != gpu.KindAny {
			desc += fmt.Sprintf(" (%s each)", config.FormatSize(g.Memory))
		} else {
			desc = "the cheapest slice with " + desc
		}
	}
	fmt.Fprintf(tw, "  GPU:\t%s\n", desc)
	display := p.Display.Type
	if p.Display.VGPUDisplay {
		display += ", showing the vGPU's display"
	}
	fmt.Fprintf(tw, "  Display:\t%s\n", display)
	if d := p.Desktop; d.Tunneled() {
		desktop := fmt.Sprintf("%s in the guest, port %d (gpuvm desktop)", d.Protocol, d.Port)
		if d.Protocol == config.DesktopDCV {
			desktop += ", session " + d.Session
		}
		fmt.Fprintf(tw, "  Desktop:\t%s\n", desktop)
	}
	switch p.Network.Type {
	case "none":
		fmt.Fprintf(tw, "  Network:\tnone\n")
	case "bridge":
		fmt.Fprintf(tw, "  Network:\tbridge %s, %s\n", p.Network.Source, p.Network.Model)
	default:
		fmt.Fprintf(tw, "  Network:\tlibvirt network %s, %s\n", p.Network.Source, p.Network.Model)
	}
	if ci := p.CloudInit; ci != nil {
		vars := ""
		if len(ci.Vars) > 0 {
			vars = ", vars " + string(ci.Vars)
		}
		fmt.Fprintf(tw, "  Cloud-init:\ttemplate %s%s\n", ci.Template, vars)
	}
	lease := fmt.Sprintf("%s by default, at most %s", config.FormatDuration(p.Lease.Default), config.FormatDuration(p.Lease.Max))
	if p.Lease.IdleStop > 0 {
		lease += ", stopped after " + config.FormatDuration(p.Lease.IdleStop) + " idle"
	}
	fmt.Fprintf(tw, "  Lease:\t%s\n", lease)
	who := "everyone"
	if !p.Open() {
		var parts []string
		if len(p.Groups) > 0 {
			parts = append(parts, "groups "+strings.Join(p.Groups, ", "))
		}
		if len(p.Users) > 0 {
			parts = append(parts, "users "+strings.Join(p.Users, ", "))
		}
		who = strings.Join(parts, "; ")
	}
	fmt.Fprintf(tw, "  Who:\t%s\n", who)
	fmt.Fprintf(tw, "  Class:\t%s, priority %d\n", p.Class, p.Priority)
	return tw.Flush()
}
