package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/client"
)

func newLoginCmd(getenv func(string) string) *cobra.Command {
	var token string
	cmd := &cobra.Command{
		Use:   "login URL",
		Short: "Check a token against gpuvmd and save the URL and the token",
		Long: `Checks the token against the server at URL (it lists the profiles) and, if the
server accepts it, saves the URL and the token in
$XDG_CONFIG_HOME/gpuvm/config.hcl (~/.config/gpuvm/config.hcl), readable by
you only (mode 0600). Later commands use them when --url/--token and
$GPUVM_URL/$GPUVM_TOKEN are not given.

Without --token the token is read from the standard input: pasted at the
prompt on a terminal (it is shown as typed), or piped from a file
('gpuvm login URL < token-file'), which keeps it out of the shell's history.
` + exitHelp,
		Example: "  gpuvm login https://gpu.example:8443 < ~/gpuvm.token",
		Args:    exactArgs(1, "the server's URL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLogin(cmd, getenv, args[0], token)
		},
	}
	cmd.Flags().StringVar(&token, "token", "", "the API token (default: read from the standard input)")
	return cmd
}

func runLogin(cmd *cobra.Command, getenv func(string) string, url, token string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if _, err := client.ParseURL(url); err != nil {
		return usageError{err}
	}
	path, err := configPath(getenv)
	if err != nil {
		return err
	}
	if token == "" {
		t := terminalOf(cmd)
		if t.inTTY {
			fmt.Fprintf(stderr, "Token for %s (it is shown as you type): ", url)
		}
		line, err := bufio.NewReader(t.in).ReadString('\n')
		if err != nil && line == "" {
			return usageError{errors.New("no token: pass --token or give it on the standard input")}
		}
		token = strings.TrimSpace(line)
	}
	token = strings.TrimSpace(token)
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return usageError{errors.New("the token is empty or not one word")}
	}
	c, err := client.New(url, token)
	if err != nil {
		return usageError{err}
	}
	c.UserAgent = "gpuvm/" + version
	ctx, cancel := context.WithTimeout(cmd.Context(), timeoutLogin)
	defer cancel()
	ps, err := c.ListProfiles(ctx)
	if err != nil {
		return explain(err, c, stderr)
	}
	if err := writeClientConfig(path, clientConfig{URL: c.URL(), Token: token}); err != nil {
		return fmt.Errorf("save the token: %w", err)
	}
	fmt.Fprintf(stdout, "Logged in to %s: the token works (%s you may use). Saved in %s.\n", c.URL(), plural(len(ps), "profile"), path)
	return nil
}
