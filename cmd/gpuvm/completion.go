package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newCompletionCmd replaces cobra's default completion command with one
// whose help says how to install each script.
func newCompletionCmd(root *cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print the shell completion script",
		Long: `Prints a script that completes gpuvm's commands and flags, and the names of
your VMs (show, delete) and of the profiles (create), which it asks the
server for; when the server cannot be asked it completes nothing.

  bash:  source <(gpuvm completion bash)     # in ~/.bashrc
  zsh:   gpuvm completion zsh > "${fpath[1]}/_gpuvm"
  fish:  gpuvm completion fish > ~/.config/fish/completions/gpuvm.fish
  powershell: gpuvm completion powershell | Out-String | Invoke-Expression`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError{fmt.Errorf("%s takes one of bash, zsh, fish or powershell, got %q", cmd.CommandPath(), args)}
		},
	}
	for _, sh := range []struct {
		name string
		gen  func(*cobra.Command) error
	}{
		{"bash", func(cmd *cobra.Command) error { return root.GenBashCompletionV2(cmd.OutOrStdout(), true) }},
		{"zsh", func(cmd *cobra.Command) error { return root.GenZshCompletion(cmd.OutOrStdout()) }},
		{"fish", func(cmd *cobra.Command) error { return root.GenFishCompletion(cmd.OutOrStdout(), true) }},
		{"powershell", func(cmd *cobra.Command) error { return root.GenPowerShellCompletionWithDesc(cmd.OutOrStdout()) }},
	} {
		c.AddCommand(&cobra.Command{
			Use:                   sh.name,
			Short:                 "Print the " + sh.name + " completion script",
			Args:                  noArgs,
			DisableFlagsInUseLine: true,
			ValidArgsFunction:     cobra.NoFileCompletions,
			RunE:                  func(cmd *cobra.Command, _ []string) error { return sh.gen(cmd) },
		})
	}
	return c
}
