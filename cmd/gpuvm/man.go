package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCmd is the hidden command the package build runs to write one man
// page per command (gpuvm.1, gpuvm-admin-doctor.1, …) from the commands'
// own help (packaging/build.sh).
func newManCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:    "__man DIR",
		Short:  "Write the man pages of gpuvm into DIR (the package build runs it)",
		Hidden: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("%s takes the directory to write into", cmd.CommandPath())}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root.DisableAutoGenTag = true
			return doc.GenManTree(root, &doc.GenManHeader{Title: "GPUVM", Section: "1", Source: "gpuvm " + version, Manual: "gpuvm manual"}, args[0])
		},
	}
}
