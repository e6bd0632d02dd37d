package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

// rangeHelp says what --from and --to take.
const rangeHelp = `
--from and --to take an RFC 3339 time (2026-03-01T00:00:00Z), a local date
(2026-03-01: its midnight, so --to 2026-04-01 includes all of March), a local
date and time ("2026-03-01 18:00"), or a time ago (36h, 7d, 2w). The range
includes --from and excludes --to; the defaults are the last 30 days up to
now.`

// rangeOpts are --from and --to.
type rangeOpts struct{ from, to string }

func (o *rangeOpts) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.from, "from", "", "start of the range (default: 30 days before --to)")
	cmd.Flags().StringVar(&o.to, "to", "", "end of the range, excluded (default: now)")
}

// times reads the flags; zero times are the server's defaults.
func (o rangeOpts) times(now time.Time) (from, to time.Time, err error) {
	if from, err = parseWhen("--from", o.from, now); err != nil {
		return
	}
	if to, err = parseWhen("--to", o.to, now); err != nil {
		return
	}
	if !from.IsZero() && !to.IsZero() && !to.After(from) {
		err = usageError{fmt.Errorf("--to %s is not after --from %s", o.to, o.from)}
	}
	return
}

// whenLayouts are the local forms --from and --to take besides RFC 3339.
var whenLayouts = []string{"2006-01-02", "2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02T15:04:05"}

// parseWhen reads a time flag: RFC 3339, a local date or date and time, or
// a time ago ("36h", "7d", "2w"). "" is the zero time.
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if s == "now" {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range whenLayouts {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	if d, ok := parseAgo(s); ok {
		return now.Add(-d), nil
	}
	return time.Time{}, usageError{fmt.Errorf(`%s %q: give an RFC 3339 time (2026-03-01T00:00:00Z), a local date (2026-03-01), a local time ("2026-03-01 18:00") or a time ago (36h, 7d, 2w)`, flag, s)}
}

// parseAgo reads "7d", "2w" and Go durations ("36h", "90m"), positive.
func parseAgo(s string) (time.Duration, bool) {
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseFloat(n, 64)
			if err != nil || v <= 0 || v > 10000 {
				return 0, false
			}
			return time.Duration(v * float64(unit)), true
		}
	}
	d, err := time.ParseDuration(s)
	return d, err == nil && d > 0
}

type usageOpts struct {
	rangeOpts
	by, user string
	csv      bool
	out      outputOpts
}

func newUsageCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var u usageOpts
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show GPU-hours held and used, by user, group, profile, GPU, host or VM",
		Long: `Shows the GPU time held in a range and how much of it the GPUs were busy.
A VM is charged the share of the GPU it held: a whole GPU 1, a MIG 1g slice of
seven 1/7, a vGPU type its fraction of the board; a VM that still holds its GPU
counts up to now. You see your own usage; admins see everyone's (--user NAME
for one user's).

Columns: GPU-HOURS held; USED, the GPU-hours the GPUs were busy (held ×
utilisation), counted where the GPU reported its utilisation; UTIL, the
utilisation there ("-": no samples, unknown); VMS, the VMs charged.
` + rangeHelp + `

Output: a table by default; --csv prints one row per key with every figure
(utilization empty when unknown); --json prints the api.UsageReport.
` + connectionHelp + "\n" + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			return runUsage(ctx, c, cmd, u)
		}),
	}
	o.flags(cmd, false)
	u.rangeOpts.flags(cmd)
	cmd.Flags().StringVar(&u.by, "by", api.UsageByUser, "group by "+strings.Join(api.UsageGroupings, ", "))
	cmd.Flags().StringVar(&u.user, "user", "", "only this user's VMs (admins)")
	cmd.Flags().BoolVar(&u.csv, "csv", false, "print CSV")
	u.out.flags(cmd, "")
	_ = cmd.RegisterFlagCompletionFunc("by", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return api.UsageGroupings, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func runUsage(ctx context.Context, c *client.Client, cmd *cobra.Command, u usageOpts) error {
	if u.csv && u.out.json {
		return usageError{errors.New("--csv and --json exclude each other")}
	}
	if !slices.Contains(api.UsageGroupings, u.by) {
		return usageError{fmt.Errorf("--by %q: give one of %s", u.by, strings.Join(api.UsageGroupings, ", "))}
	}
	from, to, err := u.times(time.Now())
	if err != nil {
		return err
	}
	r, err := c.Usage(ctx, client.UsageOptions{From: from, To: to, By: u.by, User: u.user})
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	switch {
	case u.out.json:
		return writeJSON(w, r)
	case u.csv:
		return writeUsageCSV(w, r)
	}
	return printUsage(w, r)
}

// writeUsageCSV writes a header and one line per row, full precision.
func writeUsageCSV(w io.Writer, r *api.UsageReport) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{r.By, "gpu_hours", "measured_gpu_hours", "used_gpu_hours", "idle_gpu_hours", "utilization", "vms", "running"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, row := range r.Rows {
		util := ""
		if row.Utilization != nil {
			util = f(*row.Utilization)
		}
		_ = cw.Write([]string{row.Key, f(row.GPUHours), f(row.MeasuredGPUHours), f(row.UsedGPUHours), f(row.IdleGPUHours), util,
			strconv.Itoa(row.VMs), strconv.Itoa(row.Running)})
	}
	cw.Flush()
	return cw.Error()
}

func printUsage(w io.Writer, r *api.UsageReport) error {
	span := fmt.Sprintf("%s to %s", r.From.Local().Format("2006-01-02 15:04"), r.To.Local().Format("2006-01-02 15:04 MST"))
	if len(r.Rows) == 0 {
		_, err := fmt.Fprintf(w, "No GPU time held from %s.\n", span)
		return err
	}
	table := [][]string{{strings.ToUpper(r.By), "GPU-HOURS", "USED", "UTIL", "VMS"}}
	line := func(row api.UsageRow) {
		used, util := "-", "-"
		if row.Utilization != nil {
			used, util = fmtGPUHours(row.UsedGPUHours), fmt.Sprintf("%.0f%%", 100**row.Utilization)
		}
		table = append(table, []string{row.Key, fmtGPUHours(row.GPUHours), used, util, strconv.Itoa(row.VMs)})
	}
	for _, row := range r.Rows {
		line(row)
	}
	if len(r.Rows) > 1 {
		line(r.Total)
	}
	if err := printAligned(w, table); err != nil {
		return err
	}
	t := r.Total
	fmt.Fprintf(w, "\nFrom %s", span)
	if r.User != "" {
		fmt.Fprintf(w, ", %s's VMs", r.User)
	}
	fmt.Fprintln(w, ".")
	switch {
	case t.Utilization == nil:
		fmt.Fprintln(w, "No GPU reported its utilisation: how much was used is unknown.")
	case t.MeasuredGPUHours < t.GPUHours-0.005:
		fmt.Fprintf(w, "USED counts the %s GPU-hours with utilisation samples; %s had none. Held but idle: %s GPU-hours.\n",
			fmtGPUHours(t.MeasuredGPUHours), fmtGPUHours(t.GPUHours-t.MeasuredGPUHours), fmtGPUHours(t.IdleGPUHours))
	default:
		fmt.Fprintf(w, "Held but idle: %s GPU-hours.\n", fmtGPUHours(t.IdleGPUHours))
	}
	return nil
}

// printAligned prints a table: the first column to the left, the others
// (numbers) to the right, two spaces apart.
func printAligned(w io.Writer, table [][]string) error {
	widths := make([]int, len(table[0]))
	for _, row := range table {
		for i, cell := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, row := range table {
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			switch {
			case i == 0:
				b.WriteString(cell + pad)
			default:
				b.WriteString("  " + pad + cell)
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtGPUHours is GPU-hours with two decimals.
func fmtGPUHours(h float64) string { return strconv.FormatFloat(h, 'f', 2, 64) }
