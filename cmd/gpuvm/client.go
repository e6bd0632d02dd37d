package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2/hclsimple"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/spf13/cobra"
	"github.com/zclconf/go-cty/cty"
	"golang.org/x/term"

	"github.com/gpuvm/gpuvm/pkg/client"
)

// exitNoServer: the server could not be reached, refused the token, or none
// is configured.
const exitNoServer = 3

// exitHelp is the exit-status paragraph of every command that talks to
// gpuvmd.
const exitHelp = `
Exit status: 0 success; 1 the server refused the request or the VM failed;
2 usage error (bad flags or arguments, found before asking the server);
3 the server could not be reached, refused the token, or none is configured.`

// connectionHelp says where the server and the token come from.
const connectionHelp = `
The server and the token are --url and --token, else $GPUVM_URL and
$GPUVM_TOKEN, else what 'gpuvm login' saved in $XDG_CONFIG_HOME/gpuvm/config.hcl
(~/.config/gpuvm/config.hcl). The saved token is only sent to the saved URL.`

// addClientCommands registers the commands that talk to gpuvmd.
func addClientCommands(root *cobra.Command, getenv func(string) string) {
	root.AddCommand(newLoginCmd(getenv), newLogoutCmd(getenv), newProfilesCmd(getenv), newCreateCmd(getenv), newListCmd(getenv),
		newShowCmd(getenv), newDeleteCmd(getenv), newAdminCmd(getenv), newCompletionCmd(root))
	root.AddCommand(newStartCmd(getenv), newStopCmd(getenv), newRebootCmd(getenv), newExtendCmd(getenv))
	root.AddCommand(newResizeCmd(getenv)) // resize.go: another profile for a stopped VM
	// users.go: who the server takes you for, the fleet's hosts.
	root.AddCommand(newWhoamiCmd(getenv), newHostsCmd(getenv))
	root.AddCommand(newEventsCmd(getenv)) // events.go
	// console.go: the display, tunnels and SSH through gpuvmd; desktop.go:
	// the profile's desktop (RDP, Sunshine, DCV, the display).
	root.AddCommand(newConsoleCmd(getenv), newTunnelCmd(getenv), newRDPCmd(getenv), newSSHCmd(getenv))
	root.AddCommand(newDesktopCmd(getenv))
	root.AddCommand(newUsageCmd(getenv), newReportCmd(getenv)) // usage.go, report.go
	// reservations.go: GPU capacity booked ahead.
	root.AddCommand(newReserveCmd(getenv), newReservationsCmd(getenv))
	root.AddCommand(newAuditCmd(getenv)) // audit.go: your entries of the audit log
	// credentials.go: the one-time desktop password.
	root.AddCommand(newCredentialsCmd(getenv))
	root.AddCommand(newRulesCmd(getenv))    // rules.go: the rules of sharing in plain language
	root.AddCommand(newSnapshotCmd(getenv)) // snapshots.go: disk snapshots
	root.AddCommand(newVolumeCmd(getenv))   // volumes.go: data disks
	root.AddCommand(newShareCmd(getenv))    // shares.go: admin-declared shares
	root.AddCommand(newHomeCmd(getenv))     // homes.go: people's homes
	root.AddCommand(newTaskCmd(getenv))     // tasks.go: commands in VMs of their own
}

// clientOpts are the connection flags of a command.
type clientOpts struct {
	getenv     func(string) string
	url, token string
}

func (o *clientOpts) flags(cmd *cobra.Command, persistent bool) {
	f := cmd.Flags()
	if persistent {
		f = cmd.PersistentFlags()
	}
	f.StringVar(&o.url, "url", "", "gpuvmd's URL (default $GPUVM_URL, else the one 'gpuvm login' saved)")
	f.StringVar(&o.token, "token", "", "API token (default $GPUVM_TOKEN, else the one 'gpuvm login' saved)")
}

// errNoServer: nothing says which server to ask.
var errNoServer = errors.New("no server: run 'gpuvm login URL', set GPUVM_URL or pass --url")

// client resolves the server and the token and returns a client of it.
func (o *clientOpts) client() (*client.Client, error) {
	url, token := o.url, o.token
	if url == "" {
		url = o.getenv("GPUVM_URL")
	}
	if token == "" {
		token = o.getenv("GPUVM_TOKEN")
	}
	if url == "" || token == "" {
		path, err := configPath(o.getenv)
		if err != nil && url == "" {
			return nil, err
		}
		if err == nil {
			cf, err := readClientConfig(path)
			if err != nil {
				return nil, err
			}
			if url == "" {
				url = cf.URL
			}
			// The saved token is for the saved server only.
			if token == "" && cf.URL != "" && sameServer(url, cf.URL) {
				token = cf.Token
			}
		}
	}
	if url == "" {
		return nil, errNoServer
	}
	c, err := client.New(url, token)
	if err != nil {
		return nil, usageError{err}
	}
	c.UserAgent = "gpuvm/" + version
	return c, nil
}

func sameServer(a, b string) bool {
	ua, err1 := client.ParseURL(a)
	ub, err2 := client.ParseURL(b)
	return err1 == nil && err2 == nil && ua.String() == ub.String()
}

// clientConfig is the file 'gpuvm login' writes.
type clientConfig struct {
	URL   string `hcl:"url,optional"`
	Token string `hcl:"token,optional"`
}

// configPath is $XDG_CONFIG_HOME/gpuvm/config.hcl, else
// ~/.config/gpuvm/config.hcl (%APPDATA%\gpuvm\config.hcl on Windows).
func configPath(getenv func(string) string) (string, error) {
	if d := getenv("XDG_CONFIG_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "gpuvm", "config.hcl"), nil
	}
	if runtime.GOOS == "windows" {
		if d := getenv("APPDATA"); d != "" {
			return filepath.Join(d, "gpuvm", "config.hcl"), nil
		}
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "gpuvm", "config.hcl"), nil
	}
	return "", errors.New("cannot tell where gpuvm's configuration is: set HOME or XDG_CONFIG_HOME, or pass --url and --token")
}

// readClientConfig reads the file; a missing one is empty.
func readClientConfig(path string) (clientConfig, error) {
	var cf clientConfig
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cf, nil
	}
	if err != nil {
		return cf, err
	}
	if err := hclsimple.Decode(path, data, nil, &cf); err != nil {
		return cf, fmt.Errorf("read %s: %w", path, err)
	}
	return cf, nil
}

// writeClientConfig writes the file atomically, readable by its owner only.
func writeClientConfig(path string, cf clientConfig) error {
	f := hclwrite.NewEmptyFile()
	f.Body().AppendUnstructuredTokens(hclwrite.Tokens{{Type: hclsyntax.TokenComment, Bytes: []byte("# Written by gpuvm login.\n")}})
	f.Body().SetAttributeValue("url", cty.StringVal(cf.URL))
	f.Body().SetAttributeValue("token", cty.StringVal(cf.Token))
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".config-*.hcl")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	_, werr := tmp.Write(f.Bytes())
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// apiRun is the body of a command that talks to gpuvmd.
type apiRun func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error

// runE makes a cobra RunE of fn: it builds the client and turns the
// client's errors into messages and exit codes.
func (o *clientOpts) runE(fn apiRun) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := o.client()
		if err == nil {
			if p := seams(cmd).poll; p > 0 {
				c.PollMin, c.PollMax = p, p
			}
			err = fn(cmd.Context(), c, cmd, args)
		}
		return explain(err, c, cmd.ErrOrStderr())
	}
}

// explain prints what went wrong with a request and returns the exit code
// to end with; other errors are returned as they are.
func explain(err error, c *client.Client, stderr io.Writer) error {
	if err == nil {
		return nil
	}
	var ue usageError
	var ee exitError
	if errors.As(err, &ue) || errors.As(err, &ee) {
		return err
	}
	server := "the server"
	if c != nil {
		server = c.URL()
	}
	var te *client.TransportError
	p, isProblem := client.AsProblem(err)
	switch {
	case errors.Is(err, errNoServer):
		fmt.Fprintln(stderr, "gpuvm:", err)
		return exitError{exitNoServer}
	case errors.As(err, &te):
		fmt.Fprintf(stderr, "gpuvm: cannot reach gpuvmd at %s: %v\n", server, te.Err)
		return exitError{exitNoServer}
	case client.IsUnauthenticated(err):
		fmt.Fprintf(stderr, "gpuvm: %s refused the token: %s\n", server, strings.TrimPrefix(err.Error(), "Authentication required: "))
		fmt.Fprintln(stderr, "  Log in with 'gpuvm login "+server+"', or set GPUVM_TOKEN.")
		return exitError{exitNoServer}
	case isProblem:
		fmt.Fprintln(stderr, "gpuvm:", p.Error())
		if p.Field != "" && !strings.Contains(p.Detail, p.Field) {
			fmt.Fprintf(stderr, "  (field %s)\n", p.Field)
		}
		if p.Diagnostics != "" {
			fmt.Fprintln(stderr, strings.TrimRight(p.Diagnostics, "\n"))
		}
		if p.Status == 404 && strings.HasPrefix(p.Detail, "no route ") {
			fmt.Fprintln(stderr, "  This server does not know this request: it may be older than this gpuvm.")
		}
		if who := contactOf(c, p.Status); who != "" {
			fmt.Fprintf(stderr, "  Ask an admin (%s).\n", who)
		}
		return exitError{exitFailure}
	}
	return err
}

// contactOf is whom the server names to ask about it (server.contact, GET
// /v1/auth/methods), for a refusal (status 403: not allowed, or the
// sharing policy's): "" for another status, when the server names nobody,
// or when it cannot be asked within a few seconds.
func contactOf(c *client.Client, status int) string {
	if c == nil || status != http.StatusForbidden {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := c.AuthMethods(ctx)
	if err != nil {
		return ""
	}
	return m.Contact
}

// outputOpts are --json and --quiet.
type outputOpts struct{ json, quiet bool }

func (o *outputOpts) flags(cmd *cobra.Command, quietHelp string) {
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON (the API's types; see pkg/api)")
	if quietHelp != "" {
		cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, quietHelp)
	}
}

func (o outputOpts) check() error {
	if o.json && o.quiet {
		return usageError{errors.New("--json and --quiet exclude each other")}
	}
	return nil
}

// terminal is what the command knows of its terminal.
type terminal struct {
	in            io.Reader
	inTTY, outTTY bool
}

// testSeams, in the context, let tests pretend: a terminal, a faster poll.
type testSeams struct {
	term *terminal
	poll time.Duration
}

type testSeamsKey struct{}

func seams(cmd *cobra.Command) testSeams {
	s, _ := cmd.Context().Value(testSeamsKey{}).(*testSeams)
	if s == nil {
		return testSeams{}
	}
	return *s
}

func terminalOf(cmd *cobra.Command) terminal {
	if t := seams(cmd).term; t != nil {
		return *t
	}
	return terminal{in: cmd.InOrStdin(), inTTY: isTerminal(cmd.InOrStdin()), outTTY: isTerminal(cmd.OutOrStdout())}
}

// isTerminal: a terminal (golang.org/x/term, pure Go). Not any character
// device: /dev/null is one, and a script's stdin often is /dev/null.
func isTerminal(x any) bool {
	f, ok := x.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// exactArgs is a cobra.Args that wants n arguments named what.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s takes %s, got %d arguments (see '%s --help')", cmd.CommandPath(), what, len(args), cmd.CommandPath())}
		}
		return nil
	}
}

// completionTimeout bounds the requests of shell completion.
const completionTimeout = 3 * time.Second

// timeoutLogin bounds login's check of the token.
const timeoutLogin = 30 * time.Second
