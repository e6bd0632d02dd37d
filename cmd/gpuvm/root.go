package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newRoot(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "gpuvm",
		Short:         "Ask for GPU virtual machines and run the GPU servers that host them",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())}
	})
	root.AddCommand(newHostCmd(getenv))
	root.AddCommand(newConfigCmd(getenv), newProfileCmd(getenv))
	root.AddCommand(newSimCmd(getenv))
	addClientCommands(root, getenv)  // login, profiles, create, list, show, delete, admin, completion
	root.AddCommand(newManCmd(root)) // man.go
	return root
}

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
	}
	return nil
}
