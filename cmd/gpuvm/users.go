package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
)

func newWhoamiCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Say who the server takes you for: name, admin or not, groups",
		Long: `Asks the server whose token this is.

Output: a line by default; --json prints the api.User; --quiet the name only.
` + connectionHelp + "\n" + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			me, err := c.Whoami(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				return writeJSON(w, me)
			case out.quiet:
				_, err := fmt.Fprintln(w, me.Name)
				return err
			}
			s := me.Name
			if me.Source != "" && me.Source != "local" {
				s += " (from " + me.Source + ")"
			}
			if me.Admin {
				s += " (admin)"
			}
			s += groupsText(*me)
			_, err = fmt.Fprintf(w, "%s on %s\n", s, c.URL())
			return err
		}),
	}
	o.flags(cmd, false)
	out.flags(cmd, "print the name only")
	return cmd
}

func newHostsCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var out outputOpts
	var wide bool
	cmd := &cobra.Command{
		Use:   "hosts",
		Short: "List the GPU servers: state, version, heartbeat, GPUs and what is free",
		Long: `Lists the gpuvmd hosts that share the database: whether each is up (a host
whose heartbeat is older than three heartbeat intervals is down), its version,
how long ago it was last heard of, its GPUs (drained ones counted apart) and
what could still be placed on it. The table sums that up: idle GPUs, GPUs in
MIG or vGPU mode that still have room, and the largest MIG instance and, for
each board, the largest vGPU type still free ("1 idle GPU, 7 split GPUs with
room (4 MIG, 3 vGPU); largest free: MIG 7g.80gb ×4, H100-80C ×3"); --wide lists
every vGPU type and MIG profile that fits (each counted on its own). Admins
also see each host's API URL.

Output: a table by default (--wide: all of the free capacity); --json prints
the api.HostList, with all of it; --quiet the names.
` + connectionHelp + "\n" + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			hs, err := c.ListHosts(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				if hs == nil {
					hs = []api.Host{}
				}
				return writeJSON(w, api.HostList{Items: hs})
			case out.quiet:
				for _, h := range hs {
					fmt.Fprintln(w, h.Name)
				}
				return nil
			}
			return printHosts(w, hs, wide)
		}),
	}
	o.flags(cmd, false)
	out.flags(cmd, "print the names only")
	cmd.Flags().BoolVarP(&wide, "wide", "w", false, "list every vGPU type and MIG profile still free, not a summary")
	return cmd
}

func printHosts(w io.Writer, hs []api.Host, wide bool) error {
	if len(hs) == 0 {
		_, err := fmt.Fprintln(w, "No hosts: no gpuvmd has registered in this database yet.")
		return err
	}
	withURL := slices.ContainsFunc(hs, func(h api.Host) bool { return h.APIURL != "" })
	free := summariseCapacity
	if wide {
		free = describeCapacity
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "NAME\tSTATE\tVERSION\tHEARTBEAT\tGPUS\tFREE"
	if withURL {
		head += "\tURL"
	}
	fmt.Fprintln(tw, head)
	for _, h := range hs {
		gpus := strconv.Itoa(h.GPUs)
		if h.DrainedGPUs > 0 {
			gpus += fmt.Sprintf(" (%d drained)", h.DrainedGPUs)
		}
		name := h.Name
		if h.Simulated {
			name += " (simulated)"
		}
		if h.Leader && len(hs) > 1 { // the node that places the fleet's queue
			name += " (leader)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s", name, h.State, orDash(h.Version), agoText(time.Duration(h.HeartbeatAge*float64(time.Second))), gpus, free(h.Free))
		if withURL {
			fmt.Fprintf(tw, "\t%s", orDash(h.APIURL))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// agoText is "12s ago", "3m ago", "2h5m ago".
func agoText(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%ds ago", int(d.Round(time.Second)/time.Second))
	}
	return config.HumanDuration(d) + " ago"
}

// gpusWords says which GPUs have room: "1 idle GPU", "7 split GPUs with
// room (4 MIG, 3 vGPU)" — an idle GPU is one in no mode yet; a GPU in MIG
// or vGPU mode that holds little is not busy, and is counted here too.
func gpusWords(c api.Capacity) []string {
	var parts []string
	if c.IdleGPUs > 0 {
		parts = append(parts, plural(c.IdleGPUs, "idle GPU"))
	}
	n := 0
	var modes []string
	for _, m := range []struct{ key, word string }{{"mig", "MIG"}, {"vgpu", "vGPU"}} {
		if k := c.SplitGPUs[m.key]; k > 0 {
			n += k
			modes = append(modes, fmt.Sprintf("%d %s", k, m.word))
		}
	}
	if n > 0 {
		parts = append(parts, fmt.Sprintf("%s with room (%s)", plural(n, "split GPU"), strings.Join(modes, ", ")))
	}
	return parts
}

// describeCapacity is "2 idle GPUs, 1 split GPU with room (1 MIG),
// 3g.40gb×4, L40S-12Q×7", or "none".
func describeCapacity(c api.Capacity) string {
	parts := gpusWords(c)
	for _, m := range []map[string]int{c.MIG, c.VGPU} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// summariseCapacity is what is free in a line: the idle GPUs, the split
// ones with room, and the largest MIG instance and, for each board, vGPU
// type that could still be placed ("1 idle GPU, 7 split GPUs with room
// (4 MIG, 3 vGPU); largest free: MIG 7g.80gb ×4, H100-80C ×3"), or "none".
func summariseCapacity(c api.Capacity) string {
	var largest []string
	if name, ok := largestMIG(c.MIG); ok {
		largest = append(largest, fmt.Sprintf("MIG %s ×%d", name, c.MIG[name]))
	}
	for _, name := range largestVGPUs(c.VGPU) {
		largest = append(largest, fmt.Sprintf("%s ×%d", name, c.VGPU[name]))
	}
	parts := []string{strings.Join(gpusWords(c), ", ")}
	if parts[0] == "" {
		parts = nil
	}
	if len(largest) > 0 {
		parts = append(parts, "largest free: "+strings.Join(largest, ", "))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

var migName = regexp.MustCompile(`^(\d+)g\.(\d+)gb`)

// largestMIG is the free MIG profile with the most memory, then compute
// slices; of equals, the plain one ("1g.10gb" before "1g.10gb+me").
func largestMIG(free map[string]int) (string, bool) {
	best, bc, bm := "", -1, -1
	for _, name := range slices.Sorted(maps.Keys(free)) {
		if free[name] <= 0 {
			continue
		}
		c, m := -1, -1
		if p := migName.FindStringSubmatch(name); p != nil {
			c, _ = strconv.Atoi(p[1])
			m, _ = strconv.Atoi(p[2])
		}
		if m > bm || (m == bm && c > bc) || (m == bm && c == bc && len(name) < len(best)) {
			best, bc, bm = name, c, m
		}
	}
	return best, best != ""
}

// largestVGPUs is, for each board, the free vGPU type with the most
// framebuffer (of equals, the first by name), ordered by board; a name
// that is not a vGPU type is a board of its own.
func largestVGPUs(free map[string]int) []string {
	type pick struct {
		name string
		mem  uint64
	}
	best := map[string]pick{}
	for _, name := range slices.Sorted(maps.Keys(free)) {
		if free[name] <= 0 {
			continue
		}
		board, mem := name, uint64(0)
		if t, err := gpu.ParseVGPUType(name); err == nil {
			board, mem = t.Board, t.Memory
		}
		if b, ok := best[board]; !ok || mem > b.mem {
			best[board] = pick{name, mem}
		}
	}
	var out []string
	for _, board := range slices.Sorted(maps.Keys(best)) {
		out = append(out, best[board].name)
	}
	return out
}

func newAdminUsersCmd(o *clientOpts) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "users",
		Short: "List and create users (alone: list)",
		Long: `Lists the users, or creates one. 'gpuvm admin users' alone lists them.
` + exitHelp,
	}
	list := newAdminUsersListCmd(o)
	cmd.Args, cmd.RunE = list.Args, list.RunE
	cmd.Flags().AddFlagSet(list.Flags())
	cmd.AddCommand(list, newAdminUsersCreateCmd(o))
	return cmd
}

func newAdminUsersListCmd(o *clientOpts) *cobra.Command {
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the users with their groups",
		Long: `Lists every user by name: admin or not, groups, when created.

Output: a table by default; --json prints the api.UserList; --quiet the names.
` + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			us, err := c.ListUsers(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				if us == nil {
					us = []api.User{}
				}
				return writeJSON(w, api.UserList{Items: us})
			case out.quiet:
				for _, u := range us {
					fmt.Fprintln(w, u.Name)
				}
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tADMIN\tGROUPS\tCREATED\tSOURCE")
			for _, u := range us {
				created := "-"
				if u.CreatedAt != nil {
					created = u.CreatedAt.Local().Format(time.DateTime)
				}
				source := cmp.Or(u.Source, "local")
				if u.DisabledAt != nil {
					source += " (disabled " + u.DisabledAt.Local().Format(time.DateTime) + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.Name, yesNo(u.Admin), orDash(strings.Join(u.Groups, ",")), created, source)
			}
			return tw.Flush()
		}),
	}
	out.flags(cmd, "print the names only")
	return cmd
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func newAdminUsersCreateCmd(o *clientOpts) *cobra.Command {
	var (
		req api.CreateUserRequest
		out outputOpts
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a user",
		Long: `Creates a user: lower-case letters, digits and dashes, starting with a letter.
--group puts the user in a group (repeatable; groups are made as needed);
--admin makes an admin. The user needs a token next:
'gpuvm admin tokens create NAME'.

Output: a line by default; --json prints the api.User.
` + exitHelp,
		Example: `  gpuvm admin users create ann --group artists --group render`,
		Args:    exactArgs(1, "one user name"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			u, err := c.CreateUser(ctx, req)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if out.json {
				return writeJSON(w, u)
			}
			s := "Created user " + u.Name
			if u.Admin {
				s += " (admin)"
			}
			if len(u.Groups) > 0 {
				s += " in " + strings.Join(u.Groups, ", ")
			}
			fmt.Fprintln(w, s+".")
			_, err = fmt.Fprintf(w, "Give them a token: gpuvm admin tokens create %s\n", u.Name)
			return err
		}),
	}
	cmd.Flags().BoolVar(&req.Admin, "admin", false, "make the user an admin")
	cmd.Flags().StringArrayVar(&req.Groups, "group", nil, "a group of the user (repeatable)")
	out.flags(cmd, "")
	return cmd
}

func newAdminTokensCmd(o *clientOpts) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "List, create and revoke API tokens",
		Long: `Lists, creates and revokes API tokens. Admins may do it for anyone; any user
may do it for themself with the same commands. Only a token's prefix is kept
for show: the token itself is printed once, when it is made.
` + exitHelp,
		Args: noArgs,
	}
	cmd.AddCommand(newAdminTokensListCmd(o), newAdminTokensCreateCmd(o), newAdminTokensRevokeCmd(o))
	return cmd
}

func newAdminTokensListCmd(o *clientOpts) *cobra.Command {
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "list [USER]",
		Short: "List a user's tokens (default: your own)",
		Long: `Lists a user's tokens, newest first, revoked and expired ones included.
Without USER, your own.

Output: a table by default; --json prints the api.TokenList; --quiet the IDs.
` + exitHelp,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{fmt.Errorf("%s takes at most one user name, got %d arguments", cmd.CommandPath(), len(args))}
			}
			return nil
		},
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			var name string
			if len(args) == 1 {
				name = args[0]
			} else {
				me, err := c.Whoami(ctx)
				if err != nil {
					return err
				}
				name = me.Name
			}
			ts, err := c.ListTokens(ctx, name)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				if ts == nil {
					ts = []api.Token{}
				}
				return writeJSON(w, api.TokenList{Items: ts})
			case out.quiet:
				for _, t := range ts {
					fmt.Fprintln(w, t.ID)
				}
				return nil
			}
			return printTokens(w, name, ts)
		}),
	}
	out.flags(cmd, "print the IDs only")
	return cmd
}

func printTokens(w io.Writer, user string, ts []api.Token) error {
	if len(ts) == 0 {
		_, err := fmt.Fprintf(w, "%s has no tokens.\n", user)
		return err
	}
	when := func(t *time.Time, none string) string {
		if t == nil {
			return none
		}
		return t.Local().Format(time.DateTime)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tSTATE\tCREATED\tEXPIRES\tLAST USED")
	for _, t := range ts {
		fmt.Fprintf(tw, "%d\t%s\t%s…\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Prefix, t.State, when(&t.CreatedAt, "-"),
			when(t.ExpiresAt, "never"), when(t.LastUsedAt, "never"))
	}
	return tw.Flush()
}

// maxExpiryDays is the longest life of a token, as the server allows it
// (ten years of 365 days).
const maxExpiryDays = 10 * 365

// parseExpiry reads --expires: a duration in whole hours ("720h", "30d",
// "1d12h"); "" or "never": no expiry (0).
func parseExpiry(s string) (hours int, err error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "never" {
		return 0, nil
	}
	var d time.Duration
	if days, rest, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, usageError{fmt.Errorf("--expires %q: %q is not a number of days", s, days)}
		}
		if n > maxExpiryDays { // before the multiplication, which overflows
			return 0, usageError{fmt.Errorf("--expires %q: a token lives at most %d days (ten years)", s, maxExpiryDays)}
		}
		d = time.Duration(n) * 24 * time.Hour
		s = rest
	}
	if s != "" {
		x, err := time.ParseDuration(s)
		if err != nil {
			return 0, usageError{fmt.Errorf("--expires: %w (give hours or days: 720h, 30d)", err)}
		}
		d += x
	}
	if d <= 0 || d%time.Hour != 0 {
		return 0, usageError{errors.New("--expires is a positive number of whole hours or days (720h, 30d), or never")}
	}
	if d > maxExpiryDays*24*time.Hour {
		return 0, usageError{fmt.Errorf("--expires: a token lives at most %d days (ten years)", maxExpiryDays)}
	}
	return int(d / time.Hour), nil
}

func newAdminTokensCreateCmd(o *clientOpts) *cobra.Command {
	var (
		name, expires string
		out           outputOpts
	)
	cmd := &cobra.Command{
		Use:   "create USER",
		Short: "Make a token for a user and print it (once)",
		Long: `Makes an API token for USER and prints it: the server keeps only its hash, so
this is the only time it is seen. --expires sets its life in whole hours or
days (720h, 30d; default: it does not expire); --name tells the user's tokens
apart (default: token-DATE-TIME).

Output: the token with a note by default; --quiet prints the token only (for
scripts: GPUVM_TOKEN=$(gpuvm admin tokens create ann -q)); --json prints the
api.CreatedToken, the token in its "token" field.
` + exitHelp,
		Example: `  gpuvm admin tokens create ann --name laptop --expires 30d`,
		Args:    exactArgs(1, "one user name"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			hours, err := parseExpiry(expires)
			if err != nil {
				return err
			}
			if name == "" {
				name = "token-" + time.Now().Format("20060102-150405")
			}
			tok, err := c.CreateToken(ctx, args[0], api.CreateTokenRequest{Name: name, ExpiresInHours: hours})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				return writeJSON(w, tok)
			case out.quiet:
				_, err := fmt.Fprintln(w, tok.Secret)
				return err
			}
			exp := "does not expire"
			if tok.ExpiresAt != nil {
				exp = "expires " + tok.ExpiresAt.Local().Format(time.DateTime)
			}
			fmt.Fprintf(w, "Token %d (%s) of %s, %s:\n\n  %s\n\n", tok.ID, tok.Name, tok.User, exp, tok.Secret)
			fmt.Fprintf(w, "It is shown only now. Use it with 'gpuvm login %s', or as GPUVM_TOKEN.\n", c.URL())
			_, err = fmt.Fprintf(w, "Revoke it with 'gpuvm admin tokens revoke %s %d'.\n", tok.User, tok.ID)
			return err
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "the token's name (default: token-DATE-TIME)")
	cmd.Flags().StringVar(&expires, "expires", "", "its life: whole hours or days (720h, 30d), or never (the default)")
	out.flags(cmd, "print the token only")
	return cmd
}

func newAdminTokensRevokeCmd(o *clientOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke USER ID",
		Short: "Revoke a token: it is refused from now on",
		Long: `Revokes the token ID of USER ('gpuvm admin tokens list USER' shows the IDs).
Revoking a revoked token is no error.
` + exitHelp,
		Args: exactArgs(2, "a user name and a token ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || id <= 0 {
				return usageError{fmt.Errorf("token ID %q is not a number ('gpuvm admin tokens list %s' shows them)", args[1], args[0])}
			}
			if err := c.RevokeToken(ctx, args[0], id); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "Revoked token %d of %s.\n", id, args[0])
			return err
		}),
	}
}

func newAdminDrainCmd(o *clientOpts) *cobra.Command {
	var (
		reason string
		out    outputOpts
	)
	cmd := &cobra.Command{
		Use:   "drain GPU|NODE",
		Short: "Drain a GPU or a node: it takes no new VMs, the ones on it keep running",
		Long: `Drains a GPU of the server, named by its PCI address (0000:41:00.0 or 41:00.0;
'gpuvm admin gpus' lists them): the scheduler places nothing new on it, and
VMs that wait only for it say so. What runs on it keeps running. Draining a
drained GPU replaces the reason. 'gpuvm admin undrain GPU' ends it.

Given a node's name ('gpuvm hosts' lists the nodes sharing the database), it
drains the whole node: nothing new is placed there. The VMs on it stay there
and are named: their disks are local to the node, so gpuvm cannot move them;
the node is empty once they are deleted or their leases end.

Output: a line by default; --json prints the api.GPUDrainState (a GPU) or
the api.HostDrainState (a node).
` + exitHelp,
		Example: `  gpuvm admin drain 0000:41:00.0 --reason "fan replacement, back Tuesday"
  gpuvm admin drain gpu-03`,
		Args: exactArgs(1, "one GPU address or node name"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if !isGPUAddress(args[0]) { // a node (fleet.go)
				return drainNode(ctx, c, cmd.OutOrStdout(), args[0], reason, out)
			}
			st, err := c.DrainGPU(ctx, args[0], reason)
			if err != nil {
				return err
			}
			if out.json {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			why := ""
			if st.Drained != nil && st.Drained.Reason != "" {
				why = " (" + st.Drained.Reason + ")"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "Drained GPU %s of %s%s: it takes no new VMs; the ones on it keep running.\n", st.Address, st.Host, why)
			return err
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the users whose VMs wait (one line)")
	out.flags(cmd, "")
	return cmd
}

func newAdminUndrainCmd(o *clientOpts) *cobra.Command {
	var out outputOpts
	cmd := &cobra.Command{
		Use:   "undrain GPU|NODE",
		Short: "End a GPU's or a node's drain: it takes VMs again",
		Long: `Ends the drain of a GPU (a PCI address) or of a node (a name, 'gpuvm hosts'):
the scheduler may place VMs on it again, and queued VMs that waited for it
are placed at once. One that is not drained is an error (exit 1).

Output: a line by default; --json prints the api.GPUDrainState (a GPU) or
the api.HostDrainState (a node).
` + exitHelp,
		Args: exactArgs(1, "one GPU address or node name"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if !isGPUAddress(args[0]) { // a node (fleet.go)
				return undrainNode(ctx, c, cmd.OutOrStdout(), args[0], out)
			}
			st, err := c.UndrainGPU(ctx, args[0])
			if err != nil {
				return err
			}
			if out.json {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "GPU %s of %s takes VMs again.\n", st.Address, st.Host)
			return err
		}),
	}
	out.flags(cmd, "")
	return cmd
}
