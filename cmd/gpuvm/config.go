package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	_ "time/tzdata" // policy timezones resolve on machines without a zoneinfo database

	"github.com/hashicorp/hcl/v2"
	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/config"
)

func newConfigCmd(getenv func(string) string) *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "Check gpuvm's HCL configuration (offline, on the files)"}
	c.AddCommand(newValidateCmd(getenv))
	return c
}

// configDir is --config, else $GPUVM_CONFIG, else /etc/gpuvm.
func configDir(flag string, getenv func(string) string) string {
	if flag != "" {
		return flag
	}
	if d := getenv("GPUVM_CONFIG"); d != "" {
		return d
	}
	return config.DefaultDir
}

func newValidateCmd(getenv func(string) string) *cobra.Command {
	var strict bool
	cmd := &cobra.Command{
		Use:   "validate [DIR | FILE...]",
		Short: "Check a configuration and print every problem with its place",
		Long: `Reads a configuration as gpuvmd would and reports every error and warning of
every file at once, each at file:line:column with the offending text
underlined. Nothing is started and nothing on the host is read but the files.

Each DIR is checked as one configuration (every *.hcl file in it); FILE
arguments are checked together as one configuration. Without arguments the
directory is $GPUVM_CONFIG, else /etc/gpuvm.

Exit status: 0 valid (warnings are printed), 1 errors (or warnings with
--strict), 2 usage error. The language is described in docs/config.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runValidate(args, strict, getenv, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&strict, "strict", false, "treat warnings as errors (exit 1)")
	return cmd
}

// configSet is what one validation loads: a directory, or files together.
type configSet struct {
	dir   string
	files []string
}

func (s configSet) name() string {
	if s.dir != "" {
		return s.dir
	}
	return strings.Join(s.files, " ")
}

func runValidate(args []string, strict bool, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		args = []string{configDir("", getenv)}
	}
	var sets []configSet
	var files []string
	for _, a := range args {
		fi, err := os.Stat(a)
		if err != nil {
			return usageError{fmt.Errorf("%s: %w", a, errorsUnwrapPath(err))}
		}
		if fi.IsDir() {
			sets = append(sets, configSet{dir: a})
		} else {
			files = append(files, a)
		}
	}
	if len(files) > 0 {
		sets = append(sets, configSet{files: files})
	}
	failed := false
	for _, s := range sets {
		l := new(config.Loader)
		var cfg *config.Config
		var diags hcl.Diagnostics
		if s.dir != "" {
			cfg, diags = l.LoadDir(s.dir)
		} else {
			cfg, diags = l.LoadFiles(s.files...)
		}
		if err := l.WriteDiagnostics(stderr, diags, 0); err != nil {
			return err
		}
		errs, warns := count(diags)
		switch {
		case errs > 0:
			failed = true
			fmt.Fprintf(stderr, "%s: %s, %s\n", s.name(), plural(errs, "error"), plural(warns, "warning"))
		default:
			if warns > 0 && strict {
				failed = true
			}
			fmt.Fprintf(stdout, "%s: valid (%s: %s, %s, %s)", s.name(), plural(len(cfg.Files), "file"),
				plural(len(cfg.Profiles), "profile"), plural(len(cfg.Images), "image"), plural(len(cfg.Templates), "template"))
			if warns > 0 {
				fmt.Fprintf(stdout, ", %s", plural(warns, "warning"))
			}
			if cfg.Server.Host.Simulate != "" {
				fmt.Fprintf(stdout, " [simulated %s server]", cfg.Server.Host.Simulate)
			}
			fmt.Fprintln(stdout)
		}
	}
	if failed {
		return exitError{exitFailure}
	}
	return nil
}

func count(diags hcl.Diagnostics) (errs, warns int) {
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			errs++
		} else {
			warns++
		}
	}
	return errs, warns
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// errorsUnwrapPath drops the path os.Stat repeats in its error.
func errorsUnwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
