package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/report"
)

type reportOpts struct {
	rangeOpts
	out, tz, title string
	idleBelow      float64
}

func newReportCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var r reportOpts
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Write an HTML report of GPU use for the admins' periodic review",
		Long: `Asks the server for a summary of the range (admins only) and writes it as one
self-contained HTML file: GPU-hours per user, group and profile, held versus
used; the VMs that held a GPU idle; queue waits per profile; and weekday ×
hour-of-day heatmaps of GPUs held, requests waiting and utilisation, with a
note when daytime capacity idles while night requests queue (or the reverse).
The file has no scripts and loads nothing: it opens offline.

Weekdays and hours are in --tz (an IANA zone; default: this computer's zone,
from $TZ or /etc/localtime, else the server's).
` + rangeHelp + `

Output: the file (--out, default report.html; - for standard output); a line
saying what was written.
` + connectionHelp + "\n" + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			return runReport(ctx, c, cmd, r, getenv)
		}),
	}
	o.flags(cmd, false)
	r.rangeOpts.flags(cmd)
	cmd.Flags().StringVarP(&r.out, "out", "o", "report.html", "the HTML file to write; - for standard output")
	cmd.Flags().StringVar(&r.tz, "tz", "", "IANA time zone of weekdays and hours (default: this computer's)")
	cmd.Flags().StringVar(&r.title, "title", "", `the report's heading (default "GPU usage report")`)
	cmd.Flags().Float64Var(&r.idleBelow, "idle-below", 0, "utilisation (0..1) under which a VM counts as idle (default: the server's, 0.1)")
	return cmd
}

func runReport(ctx context.Context, c *client.Client, cmd *cobra.Command, r reportOpts, getenv func(string) string) error {
	if r.idleBelow < 0 || r.idleBelow > 1 {
		return usageError{fmt.Errorf("--idle-below %g: give a utilisation between 0 and 1 (0.1 is 10%%)", r.idleBelow)}
	}
	if r.out == "" {
		return usageError{errors.New("--out: give a file name, or - for standard output")}
	}
	from, to, err := r.times(time.Now())
	if err != nil {
		return err
	}
	tz := r.tz
	if tz == "" {
		tz = localZone(getenv, os.Readlink)
	} else if _, err := time.LoadLocation(tz); err != nil || tz == "Local" {
		return usageError{fmt.Errorf("--tz %q: give an IANA time zone such as Europe/Berlin or UTC", tz)}
	}
	s, err := c.ReportSummary(ctx, client.ReportOptions{From: from, To: to, TZ: tz, IdleBelow: r.idleBelow})
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := report.Render(&b, s, report.Options{Title: r.title, Server: c.URL()}); err != nil {
		return err
	}
	if r.out == "-" {
		_, err := cmd.OutOrStdout().Write(b.Bytes())
		return err
	}
	if err := writeFileAtomic(r.out, b.Bytes()); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "Wrote %s (%d KiB): %s to %s, %s.\n", r.out, (b.Len()+1023)/1024,
		s.From.Local().Format("2006-01-02 15:04"), s.To.Local().Format("2006-01-02 15:04"), plural(len(s.ByUser), "user"))
	return err
}

// localZone is the IANA name of this computer's time zone: $TZ when it is
// one, else where /etc/localtime points into a zoneinfo directory; "" when
// neither says (the server's zone is used then).
func localZone(getenv func(string) string, readlink func(string) (string, error)) string {
	if tz := strings.TrimPrefix(getenv("TZ"), ":"); tz != "" && !filepath.IsAbs(tz) {
		if _, err := time.LoadLocation(tz); err == nil {
			return tz
		}
	}
	target, err := readlink("/etc/localtime")
	if err != nil {
		return ""
	}
	if _, name, ok := strings.Cut(filepath.ToSlash(target), "zoneinfo/"); ok {
		if _, err := time.LoadLocation(name); err == nil {
			return name
		}
	}
	return ""
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory, so that a reader never sees half a report.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Chmod(0o644), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
