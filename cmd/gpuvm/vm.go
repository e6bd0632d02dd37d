package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// vmStates are the states a VM can be in (GET /v1/vms?state=).
var vmStates = api.VMStates

func newProfilesCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "profiles",
		Short: "List the profiles you may make VMs from (asks the server)",
		Long: `Lists the profiles the server offers you: what GPU slice, vCPUs, memory and
disk a VM of each gets, its lease (default/maximum), and what is free now, in
the portal's words: how many VMs of it the hosts could place one after the
other, of how many they hold in all ("3 free of 28", "2 free of 6 GPUs",
"23 free of 60: 20 as MIG slices, 3 as vGPUs", "none free"; "-" when not
counted). A profile that no GPU
of the server's hosts can ever give (a board or mode they do not have) is
marked "(unservable)", and why is said under the table; a VM of it is refused.
A profile whose disk image, boot kernel or template is not on the server now
(not built or imported yet) is marked "(unavailable)", and why is said under
the table; a VM of it is refused too, until an admin puts it there.
'gpuvm profile list' reads configuration files instead.
` + connectionHelp + "\n" + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			ps, err := c.ListProfiles(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				if ps == nil {
					ps = []client.Profile{}
				}
				return writeJSON(w, ps)
			case out.quiet:
				for _, p := range ps {
					fmt.Fprintln(w, p.Name)
				}
				return nil
			}
			return printRemoteProfiles(w, ps)
		}),
	}
	o.flags(cmd, false)
	out.flags(cmd, "print the names only")
	return cmd
}

func printRemoteProfiles(w io.Writer, ps []client.Profile) error {
	if len(ps) == 0 {
		_, err := fmt.Fprintln(w, "No profiles: the server offers you none.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tGPU\tFREE\tVCPUS\tMEMORY\tDISK\tLEASE\tDESCRIPTION")
	for _, p := range ps {
		var g *config.GPUNeed
		if p.GPU != nil {
			g = &config.GPUNeed{Kind: gpu.Kind(p.GPU.Kind), Type: p.GPU.Type, Profile: p.GPU.Profile, Model: p.GPU.Model,
				Count: p.GPU.Count, Memory: p.GPU.Memory, Kinds: gpu.Kinds(p.GPU.Kinds), Series: p.GPU.Series}
		}
		disk := "-"
		if p.Disk != nil {
			disk = p.Disk.Image
			if p.Disk.Size > 0 {
				disk += " " + config.FormatSize(p.Disk.Size)
			}
		}
		lease := config.FormatDuration(time.Duration(p.Lease.Default)*time.Second) + "/" +
			config.FormatDuration(time.Duration(p.Lease.Max)*time.Second)
		gpuText := describeGPU(g)
		switch {
		case p.Unavailable != "":
			gpuText += " (unavailable)"
		case p.Unservable != "":
			gpuText += " (unservable)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", p.Name, gpuText, freeText(p), p.VCPUs, config.FormatSize(p.Memory), disk, lease, p.Description)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range ps {
		if p.Unavailable != "" {
			if _, err := fmt.Fprintf(w, "\n%s is unavailable here now, and a VM of it is refused: %s.", p.Name, p.Unavailable); err != nil {
				return err
			}
		}
		if p.Unservable != "" {
			if _, err := fmt.Fprintf(w, "\n%s is unservable here, and a VM of it is refused: %s.", p.Name, p.Unservable); err != nil {
				return err
			}
		}
	}
	if slices.ContainsFunc(ps, func(p client.Profile) bool { return p.Unservable != "" || p.Unavailable != "" }) {
		_, err := fmt.Fprintln(w)
		return err
	}
	return nil
}

// freeKinds are the kinds of GPU a free count is split into, in words, in
// the portal's order (pkg/portal/assets/i18n.js, kindWords).
var freeKinds = []struct{ kind, words string }{{"mig", "%d as MIG slices"}, {"vgpu", "%d as vGPUs"}, {"passthrough", "%d as whole GPUs"}}

// freeText says how many VMs of a profile the hosts could place now, in
// the portal's words (freeWords): "3 free of 28", "2 free of 6 GPUs" for
// whole GPUs, "23 free of 60: 20 as MIG slices, 3 as vGPUs" for a profile
// of several kinds, "none free"; "-" when the server did not count them
// (a profile without a GPU, or no host has reported).
func freeText(p client.Profile) string {
	f := p.Free
	if f == nil || p.GPU == nil {
		return "-"
	}
	if f.VMs == 0 {
		return "none free"
	}
	var kinds []string
	for _, k := range freeKinds {
		if n := f.ByKind[k.kind]; n > 0 {
			kinds = append(kinds, fmt.Sprintf(k.words, n))
		}
	}
	switch {
	case f.Total == 0:
		return fmt.Sprintf("%d free", f.VMs)
	case len(kinds) > 1:
		return fmt.Sprintf("%d free of %d: %s", f.VMs, f.Total, strings.Join(kinds, ", "))
	case len(kinds) == 1 && f.ByKind["passthrough"] > 0:
		return fmt.Sprintf("%d free of %d GPUs", f.VMs, f.Total)
	}
	return fmt.Sprintf("%d free of %d", f.VMs, f.Total)
}

// completeFromServer makes a completion of a command's first argument
// from what list asks the server (the names and their descriptions), and
// silently nothing when the server cannot be asked.
func completeFromServer(o *clientOpts, list func(context.Context, *client.Client) ([]cobra.Completion, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := o.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		all, err := list(ctx, c)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, x := range all {
			if strings.HasPrefix(string(x), toComplete) {
				out = append(out, x)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeProfiles completes the names of the profiles you may use.
func completeProfiles(o *clientOpts) cobra.CompletionFunc {
	return completeFromServer(o, func(ctx context.Context, c *client.Client) ([]cobra.Completion, error) {
		ps, err := c.ListProfiles(ctx)
		var out []cobra.Completion
		for _, p := range ps {
			out = append(out, cobra.CompletionWithDesc(p.Name, p.Description))
		}
		return out, err
	})
}

// completeVMs completes the names of your live VMs.
func completeVMs(o *clientOpts) cobra.CompletionFunc {
	return completeFromServer(o, func(ctx context.Context, c *client.Client) ([]cobra.Completion, error) {
		vms, err := c.ListAllVMs(ctx, client.ListVMsOptions{}) // live VMs
		var out []cobra.Completion
		for _, vm := range vms {
			out = append(out, cobra.CompletionWithDesc(vm.Name, vm.State+", "+vm.Profile))
		}
		return out, err
	})
}

type createOpts struct {
	name    string
	hours   int
	sshKeys []string
	volumes []string
	wait    bool
	out     outputOpts
	startAt string
	shares  []string
}

func newCreateCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var c createOpts
	cmd := &cobra.Command{
		Use:   "create PROFILE",
		Short: "Ask for a VM of a profile",
		Long: `Asks the server for a VM of PROFILE ('gpuvm profiles' lists them). The server
answers at once: the VM is queued until a GPU slice is free, then its GPU is
allocated, its disk prepared and it boots.

With --wait, follows the VM until it runs and its guest is up (or it fails) and
says each phase as it comes: queued, allocating GPU, preparing disk, booting,
ready; then prints how to reach what its profile offers (when its guest uses
the VM's one-time password: 'gpuvm credentials NAME', which shows it once).
While the VM is queued, the line says its
place in the queue and when it is expected to start ("expected start 14:20 (in
35 min, uncertain: leases may be extended)"), and is printed again when the
estimate changes. Ctrl-C stops waiting, not the VM. Without it, prints the VM
and returns; 'gpuvm show NAME' tells how it is doing.

--ssh-key FILE adds the public keys of FILE (one per line, as in
authorized_keys) to the guest's user; repeat it for more files.

--share NAME mounts an admin-declared share in the VM ('gpuvm share ls' lists
those you may mount, read-write or read-only); repeat it for more.

--start-at TIME asks for the VM ahead: it stays queued ("starts at TIME")
until then, at most 30 days ahead. TIME is an RFC 3339 time
(2026-06-01T18:00:00+02:00), a local date and time ("2026-06-01 18:00") or a
delay from now (2h30m). Its lease starts when it runs.

Output: a summary by default; --json prints the API's answer (with --wait, the
VM as it ended); --quiet prints the VM's ID only.
` + connectionHelp + "\n" + exitHelp,
		Example: `  gpuvm create l40s-seat --name render-1 --hours 4 --ssh-key ~/.ssh/id_ed25519.pub --wait`,
		Args:    exactArgs(1, "one profile name"),
		RunE: o.runE(func(ctx context.Context, cl *client.Client, cmd *cobra.Command, args []string) error {
			return runCreate(ctx, cl, cmd, args[0], c)
		}),
		ValidArgsFunction: completeProfiles(&o),
	}
	o.flags(cmd, false)
	f := cmd.Flags()
	f.StringVar(&c.name, "name", "", "the VM's name: lower-case letters, digits and dashes (default: PROFILE-random)")
	f.IntVar(&c.hours, "hours", 0, "the lease in hours (default: the profile's)")
	f.StringArrayVar(&c.sshKeys, "ssh-key", nil, "a file of SSH public keys for the guest (repeatable)")
	f.StringArrayVar(&c.volumes, "volume", nil, "attach your data disk NAME (gpuvm volume create; repeatable)")
	f.BoolVar(&c.wait, "wait", false, "wait until the VM runs and its guest is up (or it fails), showing its phases")
	f.StringArrayVar(&c.shares, "share", nil, "a share to mount in the VM (repeatable; 'gpuvm share ls' lists yours)")
	f.StringVar(&c.startAt, "start-at", "", `place the VM no earlier than TIME: RFC 3339, local "2026-06-01 18:00", or a delay such as 2h`)
	c.out.flags(cmd, "print the VM's ID only")
	return cmd
}

// readSSHKeys reads public keys, one per non-empty, non-comment line.
func readSSHKeys(files []string) ([]string, error) {
	var keys []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, usageError{fmt.Errorf("--ssh-key: %w", err)}
		}
		if strings.Contains(string(data), "PRIVATE KEY") {
			return nil, usageError{fmt.Errorf("--ssh-key %s is a private key: give the public one (%s.pub)", f, f)}
		}
		n := 0
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			keys = append(keys, line)
			n++
		}
		if n == 0 {
			return nil, usageError{fmt.Errorf("--ssh-key %s has no key", f)}
		}
	}
	return keys, nil
}

func runCreate(ctx context.Context, c *client.Client, cmd *cobra.Command, prof string, o createOpts) error {
	if err := o.out.check(); err != nil {
		return err
	}
	if o.hours < 0 {
		return usageError{errors.New("--hours must be positive")}
	}
	keys, err := readSSHKeys(o.sshKeys)
	if err != nil {
		return err
	}
	startAt, err := parseStartAt(o.startAt, time.Now())
	if err != nil {
		return err
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	created, err := c.CreateVM(ctx, api.CreateVMRequest{Profile: prof, Name: o.name, Hours: o.hours, SSHKeys: keys, StartAt: startAt, Volumes: o.volumes, Shares: o.shares}, "")
	if err != nil {
		return err
	}
	vm := created.VM
	if !o.wait {
		switch {
		case o.out.json:
			return writeJSON(stdout, created)
		case o.out.quiet:
			_, err := fmt.Fprintln(stdout, vm.ID)
			return err
		}
		fmt.Fprintf(stdout, "VM %s (%s) is %s: %s.\n", vm.Name, vm.ID, vm.State, orDash(vm.Phase))
		fmt.Fprintf(stdout, "Follow it with 'gpuvm show %s'.\n", vm.Name)
		return nil
	}
	// Progress goes to stdout unless stdout is for --json or --quiet.
	t := terminalOf(cmd)
	progressW, tty := stdout, t.outTTY
	if o.out.json || o.out.quiet {
		progressW, tty = stderr, isTerminal(stderr)
	}
	fmt.Fprintf(progressW, "Created VM %s (%s) of profile %s; waiting for it (Ctrl-C stops waiting, not the VM).\n", vm.Name, vm.ID, vm.Profile)
	p := newProgress(progressW, tty)
	last, err := c.WaitVMReady(ctx, vm.ID, func(vm api.VM) { p.set(describeProgress(vm)) })
	p.stop()
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "gpuvm: stopped waiting; VM %s goes on: see 'gpuvm show %s'.\n", vm.Name, vm.Name)
			return exitError{exitFailure}
		}
		return err
	}
	switch {
	case o.out.json:
		if err := writeJSON(stdout, last); err != nil {
			return err
		}
	case o.out.quiet:
		fmt.Fprintln(stdout, last.ID)
	default:
		if last.State == client.StateRunning {
			printConnect(stdout, *last)
		}
	}
	if last.State != client.StateRunning {
		fmt.Fprintf(stderr, "gpuvm: VM %s %s: %s\n", last.Name, last.State, orDash(last.Reason))
		return exitError{exitFailure}
	}
	return nil
}

// describeProgress is one line of a VM's progress.
func describeProgress(vm api.VM) string {
	switch vm.State {
	case api.VMQueued:
		s := api.VMQueued
		if vm.QueuePosition > 0 {
			s += fmt.Sprintf(" #%d", vm.QueuePosition)
		}
		if vm.Phase != "" {
			s += ": " + vm.Phase
		}
		if vm.Reason != "" {
			s += " (" + vm.Reason + ")"
		}
		if e := describeEstimate(vm, time.Now()); e != "" {
			s += "; expected start " + e
		}
		return s
	case api.VMRunning:
		s := api.VMRunning
		if vm.Phase != "" {
			s += ": " + vm.Phase
		}
		if vm.Reason != "" {
			s += " (" + vm.Reason + ")"
		}
		return s
	case api.VMFailed, api.VMDeleted, api.VMStopped:
		return vm.State + ": " + orDash(vm.Reason)
	}
	if vm.Phase == "" {
		return vm.State
	}
	return vm.State + ": " + vm.Phase
}

// printConnect says where a running VM is and what to do next.
func printConnect(w io.Writer, vm api.VM) {
	fmt.Fprintf(w, "VM %s is running", vm.Name)
	if vm.Host != "" {
		fmt.Fprintf(w, " on %s", vm.Host)
	}
	fmt.Fprintln(w, ".")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  ID:\t%s\n", vm.ID)
	fmt.Fprintf(tw, "  GPU:\t%s\n", describeVMGPUs(vm.GPUs))
	fmt.Fprintf(tw, "  Lease:\t%s\n", describeLease(vm, time.Now()))
	printAccess(tw, vm)
	fmt.Fprintf(tw, "  Details:\tgpuvm show %s\n", vm.Name)
	fmt.Fprintf(tw, "  Delete:\tgpuvm delete %s\n", vm.Name)
	tw.Flush()
}

// desktopSignsIn reports whether a VM's desktop (api.VM's Desktop) signs in
// as the guest's user with the VM's one-time desktop password, which
// 'gpuvm credentials' shows once: RDP (xrdp, Windows) and DCV. It is the
// guess for a server that does not say what a VM offers (api.VM's Access).
func desktopSignsIn(desktop string) bool {
	return desktop == api.DesktopRDP || desktop == api.DesktopDCV
}

// printAccess writes, in a table of "  Label:\tvalue" rows, how to reach a
// running VM: its guest's addresses, and exactly what it offers (api.VM's
// Access, from its profile): its desktop, its display console, SSH and
// tunnels through gpuvmd, its one-time password.
func printAccess(tw io.Writer, vm api.VM) {
	if vm.State != api.VMRunning {
		return
	}
	acc := offered(vm)
	for i, a := range vm.Addresses {
		label := ""
		if i == 0 {
			label = "Addresses:"
		}
		fmt.Fprintf(tw, "  %s\t%s/%d (%s", label, a.IP, a.Prefix, a.Source)
		if a.Interface != "" {
			fmt.Fprintf(tw, ", %s", a.Interface)
		}
		fmt.Fprintln(tw, ")")
	}
	if len(vm.Addresses) == 0 && acc.SSH {
		note := "none reported by the guest (no DHCP lease or guest agent to tell)"
		if vm.Phase == api.PhaseBooting {
			note = "none yet: the guest is booting"
		}
		fmt.Fprintf(tw, "  Addresses:\t%s\n", note)
	}
	switch d := acc.Desktop; {
	case d == api.DesktopVNC || d == api.DesktopSPICE:
		fmt.Fprintf(tw, "  Desktop:\tgpuvm console %s (%s display)\n", vm.Name, strings.ToUpper(d))
	case vm.Console != nil:
		fmt.Fprintf(tw, "  Display:\tgpuvm console %s (%s)\n", vm.Name, strings.ToUpper(vm.Console.Protocol))
	}
	if d := acc.Desktop; d == api.DesktopRDP || d == api.DesktopSunshine || d == api.DesktopDCV {
		if len(vm.Addresses) > 0 {
			fmt.Fprintf(tw, "  Remote desktop:\tgpuvm desktop %s (%s in the guest)\n", vm.Name, desktopName(d))
		} else {
			fmt.Fprintf(tw, "  Remote desktop:\tgpuvm desktop %s (%s in the guest, once it has an address)\n", vm.Name, desktopName(d))
		}
	}
	if acc.SSH && len(vm.Addresses) > 0 {
		fmt.Fprintf(tw, "  SSH:\tgpuvm ssh %s\n", vm.Name)
	}
	if acc.Tunnels && len(vm.Addresses) > 0 {
		fmt.Fprintf(tw, "  Tunnel:\tgpuvm tunnel %s PORT (forwards a port of the guest to 127.0.0.1)\n", vm.Name)
	}
	if acc.Password {
		fmt.Fprintf(tw, "  Password:\tgpuvm credentials %s (the desktop's one-time password: it is shown once)\n", vm.Name)
	} else if acc.PasswordReadAt != nil {
		fmt.Fprintf(tw, "  Password:\tread at %s (shown once; set a new one in the guest: gpuvm ssh %s, then passwd)\n", acc.PasswordReadAt.Local().Format("2006-01-02 15:04"), vm.Name)
	}
}

// offered is what a VM offers: the server's word (api.VM's Access), else,
// from a server that does not say, a guess from its desktop and display.
func offered(vm api.VM) api.VMAccess {
	if vm.Access != nil {
		return *vm.Access
	}
	acc := api.VMAccess{SSH: true, Tunnels: true, Password: desktopSignsIn(vm.Desktop)}
	switch vm.Desktop {
	case api.DesktopRDP, api.DesktopSunshine, api.DesktopDCV:
		acc.Desktop = vm.Desktop
	}
	if vm.Console != nil {
		acc.Console = vm.Console.Protocol
	}
	return acc
}

// progress shows a VM's phases: one line each, or on a terminal a spinner
// line that is replaced as the phases change.
type progress struct {
	w     io.Writer
	tty   bool
	start time.Time

	mu   sync.Mutex
	cur  string
	n    int
	quit chan struct{}
	done chan struct{}
}

func newProgress(w io.Writer, tty bool) *progress {
	p := &progress{w: w, tty: tty, start: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	if !tty {
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(150 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
				p.mu.Lock()
				p.draw()
				p.mu.Unlock()
			}
		}
	}()
	return p
}

var spinner = []string{"|", "/", "-", `\`}

// draw redraws the spinner line; p.mu is held.
func (p *progress) draw() {
	if p.cur == "" {
		return
	}
	p.n++
	fmt.Fprintf(p.w, "\r\x1b[K%s %s  %s", spinner[p.n%len(spinner)], p.cur, time.Since(p.start).Round(time.Second))
}

func (p *progress) set(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty {
		fmt.Fprintln(p.w, line)
		return
	}
	if p.cur != "" {
		fmt.Fprintf(p.w, "\r\x1b[K  %s\n", p.cur)
	}
	p.cur = line
	p.draw()
}

func (p *progress) stop() {
	if p.tty {
		close(p.quit)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.cur != "" {
		fmt.Fprintf(p.w, "\r\x1b[K  %s\n", p.cur)
		p.cur = ""
	}
}

type listOpts struct {
	states []string
	all    bool
	out    outputOpts
}

func newListCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var l listOpts
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List your VMs (admins: everyone's)",
		Long: `Lists your VMs, oldest first; admins see everyone's, with an OWNER column
whenever a VM listed is not theirs. Deleted VMs are left out
unless --all or --state says otherwise. --state takes one or more of
` + strings.Join(vmStates, ", ") + ` (comma-separated or repeated).

Output: a table by default; --json prints an api.VMList with every VM;
--quiet prints the IDs only.
` + connectionHelp + "\n" + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			return runList(ctx, c, cmd, l)
		}),
	}
	o.flags(cmd, false)
	cmd.Flags().StringSliceVar(&l.states, "state", nil, "only VMs in these states")
	cmd.Flags().BoolVar(&l.all, "all", false, "deleted VMs too")
	l.out.flags(cmd, "print the IDs only")
	_ = cmd.RegisterFlagCompletionFunc("state", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return vmStates, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func runList(ctx context.Context, c *client.Client, cmd *cobra.Command, l listOpts) error {
	if err := l.out.check(); err != nil {
		return err
	}
	if l.all && len(l.states) > 0 {
		return usageError{errors.New("--all and --state exclude each other")}
	}
	// The server leaves deleted VMs out unless asked for states.
	states := l.states
	if l.all {
		states = vmStates
	}
	vms, err := c.ListAllVMs(ctx, client.ListVMsOptions{States: states})
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	switch {
	case l.out.json:
		return writeJSON(w, api.VMList{Items: vms})
	case l.out.quiet:
		for _, vm := range vms {
			fmt.Fprintln(w, vm.ID)
		}
		return nil
	}
	if len(vms) == 0 {
		_, err := fmt.Fprintln(w, "No VMs.")
		return err
	}
	showOwner := othersIn(ctx, c, vms)
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "NAME\tSTATE\tPROFILE\tGPU\tLEASE\tID\tNOTE"
	if showOwner {
		head = "OWNER\t" + head
	}
	fmt.Fprintln(tw, head)
	for _, vm := range vms {
		if showOwner {
			fmt.Fprintf(tw, "%s\t", vm.Owner)
		}
		note := vm.Reason
		if note == "" && vm.State != api.VMRunning {
			note = vm.Phase
		}
		state := vm.State
		if vm.QueuePosition > 0 {
			state += fmt.Sprintf(" #%d", vm.QueuePosition)
		}
		if vm.HostState == api.HostDown { // its node of the fleet stopped answering
			state += " host-down"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", vm.Name, state, vm.Profile, describeVMGPUs(vm.GPUs),
			shortLease(vm, now), vm.ID, orDash(note))
	}
	return tw.Flush()
}

// othersIn reports whether any of vms is not the caller's (an admin's list
// is everybody's): then the list shows an OWNER column. With one owner it
// asks the server who the caller is; when it cannot tell, it shows owners.
func othersIn(ctx context.Context, c *client.Client, vms []api.VM) bool {
	owners := map[string]bool{}
	for _, vm := range vms {
		owners[vm.Owner] = true
	}
	if len(owners) != 1 {
		return len(owners) > 1
	}
	me, err := c.Whoami(ctx)
	return err != nil || !owners[me.Name]
}

func newShowCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "show VM",
		Short: "Show one VM: its state, GPU, host, lease and how to connect",
		Long: `Shows a VM, named by its name (among your live VMs) or its ID. While it runs:
its guest's addresses (once it has booted) and the commands that reach what
its profile offers, and only those: its desktop (gpuvm desktop, or gpuvm
console for a desktop on the display), its display console (gpuvm console),
SSH and tunnels through gpuvmd (gpuvm ssh, gpuvm tunnel) when it has a
network, and its one-time password (gpuvm credentials) when its guest uses one. While it is queued: its place in the
queue and its expected start, which gpuvmd predicts by replaying the queue, the
running leases and the reservations through its scheduler ("Expected start:
14:20 (in 35 min, uncertain: leases may be extended)"; uncertain says what may
move it; VMs deleted before their lease ends make it sooner). Always: what its
state allows ("Can:"): a disk snapshot, a RAM snapshot, suspend and live
migration, each yes or no with the reason, judged on its profile's GPU kind and
disk and the host's libvirt, QEMU and NVIDIA driver. For a VM that mounts your
home ("Home:"): the host your home lives on, and whether this VM runs there
(one that runs elsewhere mounts another, empty home on its own host).

Output: a description by default; --json prints the api.VM.
` + connectionHelp + "\n" + exitHelp,
		Args: exactArgs(1, "one VM name or ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			vm, err := c.GetVM(ctx, args[0])
			if err != nil {
				return err
			}
			switch {
			case out.json:
				return writeJSON(cmd.OutOrStdout(), vm)
			case out.quiet:
				_, err := fmt.Fprintln(cmd.OutOrStdout(), vm.ID)
				return err
			}
			return printVM(cmd.OutOrStdout(), *vm, time.Now())
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	out.flags(cmd, "print the ID only")
	return cmd
}

func printVM(w io.Writer, vm api.VM, now time.Time) error {
	fmt.Fprintf(w, "VM %s (%s)\n", vm.Name, vm.ID)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	state := vm.State
	if vm.Phase != "" {
		state += " (" + vm.Phase + ")"
	}
	if vm.HostState == api.HostDown {
		state += ", host-down: node " + vm.Host + " stopped answering; the VM is kept as it is until it returns"
	}
	fmt.Fprintf(tw, "  State:\t%s\n", state)
	if vm.QueuePosition > 0 {
		fmt.Fprintf(tw, "  Queue:\tposition %d\n", vm.QueuePosition)
	}
	if vm.StartAt != nil && vm.State == api.VMQueued {
		fmt.Fprintf(tw, "  Starts:\tnot before %s\n", vm.StartAt.Local().Format(time.DateTime))
	}
	if e := describeEstimate(vm, now); e != "" {
		fmt.Fprintf(tw, "  Expected start:\t%s\n", e)
	}
	if vm.Reason != "" {
		fmt.Fprintf(tw, "  Reason:\t%s\n", vm.Reason)
	}
	fmt.Fprintf(tw, "  Owner:\t%s\n", vm.Owner)
	fmt.Fprintf(tw, "  Profile:\t%s\n", vm.Profile)
	fmt.Fprintf(tw, "  Host:\t%s\n", orDash(vm.Host))
	if h := describeHome(vm); h != "" {
		fmt.Fprintf(tw, "  Home:\t%s\n", h)
	}
	if len(vm.GPUs) == 0 {
		fmt.Fprintf(tw, "  GPU:\tnone\n")
	}
	for _, g := range vm.GPUs {
		s := describeVMGPUs([]api.VMGPU{g}) + " on " + g.Address
		if g.Placement != nil {
			s += fmt.Sprintf(", slice %d", *g.Placement)
		}
		if g.Device != "" {
			s += ", device " + g.Device
		}
		switch g.License {
		case api.VGPULicensed:
			s += ", licensed"
		case api.VGPUGrace:
			s += ", NOT LICENSED (grace period: it will be throttled)"
		case api.VGPUUnlicensed:
			s += ", NOT LICENSED (throttled: see the server's licensing block)"
		}
		fmt.Fprintf(tw, "  GPU:\t%s\n", s)
	}
	fmt.Fprintf(tw, "  Lease:\t%s\n", describeLease(vm, now))
	printAccess(tw, vm)
	printShares(tw, vm.Shares) // shares.go
	printCapabilities(tw, vm.Capabilities)
	printDriverChanges(tw, vm)
	fmt.Fprintf(tw, "  Created:\t%s\n", vm.CreatedAt.Local().Format(time.DateTime))
	fmt.Fprintf(tw, "  Updated:\t%s\n", vm.UpdatedAt.Local().Format(time.DateTime))
	return tw.Flush()
}

// describeHome is the Home line of gpuvm show: the node the owner's home
// lives on and whether this VM is there; "" for a VM that mounts no home
// or whose owner has none yet.
func describeHome(vm api.VM) string {
	switch {
	case vm.HomeHost == "":
		return ""
	case vm.AwayFromHome:
		return fmt.Sprintf("on %s, not here: this VM runs on %s, so the home it mounts is another folder, on %s, without the files of the home on %s",
			vm.HomeHost, vm.Host, vm.Host, vm.HomeHost)
	case vm.Host == vm.HomeHost:
		return "on " + vm.HomeHost + ", this VM's host"
	}
	return "on " + vm.HomeHost
}

// printDriverChanges is the "Driver change:" lines of gpuvm show: each
// change of the hosts' vGPU manager announced ahead that concerns the VM,
// with the snapshot to take first.
func printDriverChanges(tw io.Writer, vm api.VM) {
	for _, dc := range vm.DriverChanges {
		note := ""
		if dc.Note != "" {
			note = " (" + dc.Note + ")"
		}
		then := "its disk cannot be snapshotted (it boots a kernel directly)"
		if dc.SnapshotLabel != "" {
			then = fmt.Sprintf("take a snapshot first: gpuvm snapshot %s --label %s", vm.Name, dc.SnapshotLabel)
		}
		fmt.Fprintf(tw, "  Driver change:\tthe hosts' NVIDIA vGPU manager moves to %s at %s%s: the NVIDIA driver inside must then be one it supports; %s\n",
			dc.Driver, dc.At.Local().Format("Mon 2 Jan 2006 15:04 MST"), note, then)
	}
}

// printCapabilities is the "Can:" section of gpuvm show: what the VM's
// state allows, each yes or no with the server's reason, and what the
// answers rest on (the host's libvirt, QEMU and NVIDIA driver).
func printCapabilities(tw io.Writer, c *api.VMCapabilities) {
	if c == nil {
		return
	}
	label := "Can:"
	for _, x := range []struct {
		name string
		c    api.Capability
	}{{"disk snapshot", c.DiskSnapshot}, {"RAM snapshot", c.MemorySnapshot}, {"suspend", c.Suspend}, {"live migration", c.LiveMigration}} {
		yes := "no"
		if x.c.Can {
			yes = "yes"
		}
		fmt.Fprintf(tw, "  %s\t%s: %s (%s)\n", label, x.name, yes, x.c.Reason)
		label = ""
	}
	if c.Basis != "" {
		fmt.Fprintf(tw, "  \tjudged on: %s\n", c.Basis)
	}
}

// describeEstimate is a queued VM's estimated start for people: "14:20
// (in 35 min, uncertain: leases may be extended)", "unknown (why)", or ""
// when the server gave none.
func describeEstimate(vm api.VM, now time.Time) string {
	if vm.State != api.VMQueued {
		return ""
	}
	if vm.EstimatedStart == nil {
		if vm.EstimatedStartNote == "" {
			return ""
		}
		return "unknown (" + strings.TrimPrefix(vm.EstimatedStartNote, "no estimate: ") + ")"
	}
	at := vm.EstimatedStart.Local()
	when := at.Format("15:04")
	if y, m, d := at.Date(); y != now.Local().Year() || m != now.Local().Month() || d != now.Local().Day() {
		when = at.Format("Mon 2 Jan 15:04")
	}
	var parts []string
	switch left := at.Sub(now); {
	case left <= time.Minute:
		parts = append(parts, "at the next scheduling round")
	case left < time.Hour:
		parts = append(parts, fmt.Sprintf("in %d min", int(left.Round(time.Minute)/time.Minute)))
	default:
		parts = append(parts, "in "+config.HumanDuration(left))
	}
	if vm.EstimatedStartUncertain != nil && *vm.EstimatedStartUncertain {
		why, _, _ := strings.Cut(strings.TrimPrefix(vm.EstimatedStartNote, "uncertain: "), ";")
		if why == "" {
			why = "it may change"
		}
		parts = append(parts, "uncertain: "+why)
	}
	return when + " (" + strings.Join(parts, ", ") + ")"
}

func describeVMGPUs(gs []api.VMGPU) string {
	if len(gs) == 0 {
		return "-"
	}
	var parts []string
	for _, g := range gs {
		s := g.Kind
		if g.Type != "" {
			s += " " + g.Type
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func describeLease(vm api.VM, now time.Time) string {
	s := plural(vm.Hours, "hour")
	if vm.LeaseEnd != nil {
		s += ", until " + vm.LeaseEnd.Local().Format(time.DateTime)
		left := vm.LeaseEnd.Sub(now)
		switch {
		case vm.State == api.VMDeleted || vm.State == api.VMFailed:
			// The lease ended with the VM.
		case left > 0:
			s += " (" + config.HumanDuration(left) + " left)"
		default:
			s += " (over)"
		}
	}
	return s
}

func shortLease(vm api.VM, now time.Time) string {
	switch {
	case vm.State == api.VMDeleted || vm.State == api.VMFailed:
		return "-"
	case vm.LeaseEnd == nil:
		return fmt.Sprintf("%dh", vm.Hours)
	}
	left := vm.LeaseEnd.Sub(now)
	if left <= 0 {
		return "over"
	}
	return config.HumanDuration(left) + " left"
}

type deleteOpts struct {
	yes, wait bool
	out       outputOpts
}

func newDeleteCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var d deleteOpts
	cmd := &cobra.Command{
		Use:     "delete VM",
		Aliases: []string{"rm"},
		Short:   "Delete a VM: its GPU slice is freed and its disk removed",
		Long: `Deletes a VM, named by its name (among your live VMs) or its ID. Its domain,
GPU device and disk are removed and its GPU slice freed; this cannot be undone.

On a terminal it asks first, unless --yes. When the standard input is not a
terminal it refuses to go on without --yes (exit 2).

With --wait, follows the deletion to its end. Output: a line by default;
--json prints the api.OperationResponse (with --wait, the api.Operation as it
ended); --quiet prints the delete operation's ID only.
` + connectionHelp + "\n" + exitHelp,
		Args: exactArgs(1, "one VM name or ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			return runDelete(ctx, c, cmd, args[0], d)
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	cmd.Flags().BoolVarP(&d.yes, "yes", "y", false, "do not ask")
	cmd.Flags().BoolVar(&d.wait, "wait", false, "wait until the VM is deleted")
	d.out.flags(cmd, "print the operation's ID only")
	return cmd
}

func runDelete(ctx context.Context, c *client.Client, cmd *cobra.Command, ref string, d deleteOpts) error {
	if err := d.out.check(); err != nil {
		return err
	}
	t := terminalOf(cmd)
	if !d.yes && !t.inTTY {
		return usageError{errors.New("the standard input is not a terminal to ask on: pass --yes to delete without asking")}
	}
	vm, err := c.GetVM(ctx, ref)
	if err != nil {
		return err
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if !d.yes {
		fmt.Fprintf(stderr, "Delete VM %s (%s, %s, profile %s)? This cannot be undone. [y/N] ", vm.Name, vm.ID, vm.State, vm.Profile)
		answer, _ := bufio.NewReader(t.in).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			fmt.Fprintln(stderr, "Nothing was deleted.")
			return exitError{exitFailure}
		}
	}
	op, err := c.DeleteVM(ctx, vm.ID)
	if err != nil {
		return err
	}
	if !d.wait {
		switch {
		case d.out.json:
			return writeJSON(stdout, api.OperationResponse{Operation: *op})
		case d.out.quiet:
			_, err := fmt.Fprintln(stdout, op.ID)
			return err
		}
		_, err := fmt.Fprintf(stdout, "Deleting VM %s (%s): operation %s.\n", vm.Name, vm.ID, op.ID)
		return err
	}
	progressW, tty := stdout, t.outTTY
	if d.out.json || d.out.quiet {
		progressW, tty = stderr, isTerminal(stderr)
	}
	p := newProgress(progressW, tty)
	last, err := c.WaitOperation(ctx, op.ID, func(op api.Operation) {
		s := "delete " + op.State
		switch {
		case op.State == api.OpDone:
			s = api.VMDeleted
		case op.State == api.OpFailed:
			s += ": " + orDash(op.Error)
		case op.Step != "":
			s += ": " + op.Step
		}
		p.set(s)
	})
	p.stop()
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "gpuvm: stopped waiting; the deletion of VM %s goes on.\n", vm.Name)
			return exitError{exitFailure}
		}
		return err
	}
	switch {
	case d.out.json:
		if err := writeJSON(stdout, last); err != nil {
			return err
		}
	case d.out.quiet:
		fmt.Fprintln(stdout, last.ID)
	case last.State == api.OpDone:
		fmt.Fprintf(stdout, "VM %s is deleted.\n", vm.Name)
	}
	if last.State != api.OpDone {
		fmt.Fprintf(stderr, "gpuvm: deleting VM %s failed: %s\n", vm.Name, orDash(last.Error))
		return exitError{exitFailure}
	}
	return nil
}

// desktopName is a desktop protocol as people write it.
func desktopName(protocol string) string {
	switch protocol {
	case api.DesktopRDP:
		return "RDP"
	case api.DesktopSunshine:
		return "Sunshine"
	case api.DesktopDCV:
		return "DCV"
	}
	return strings.ToUpper(protocol)
}
