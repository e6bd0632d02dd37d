package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/oauth2"
	"golang.org/x/term"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

func newLoginCmd(getenv func(string) string) *cobra.Command {
	var token, user string
	var sso bool
	cmd := &cobra.Command{
		Use:   "login URL",
		Short: "Sign in with your directory account, or check a token, and save the URL and the token",
		Long: `With --sso, signs in with the server's OpenID provider (its auth { oidc { } }).
Where the provider offers the device authorization grant: open the URL it
shows on any device (a phone will do), type the code, sign in there. Where
it does not: gpuvm listens on 127.0.0.1 (a random port) and opens the
sign-in in this computer's browser (or prints the URL to open here); the
provider sends the browser back to gpuvm with a one-time code, which gpuvm
trades, with a PKCE verifier that never leaves it, for the session (RFC
8252). Either way gpuvm waits, then saves the session token.

With --user NAME, signs in to the server at URL with your directory account
(the server's auth { ldap { } }): the password is asked on the terminal
without echo, or read from the standard input when it is not a terminal
('gpuvm login URL --user alice < password-file'). The server answers a
session token (gvs_…) that lasts 12 hours after its last use unless the
server says otherwise (each command slides it, up to 7 days after the
sign-in); 'gpuvm logout' ends it sooner.

Without --user, checks a token against the server (it lists the profiles).
The token is --token, else read from the standard input: pasted at the
prompt on a terminal (it is shown as typed), or piped from a file
('gpuvm login URL < token-file'), which keeps it out of the shell's history.

Either way, if the server accepts it, the URL and the token are saved in
$XDG_CONFIG_HOME/gpuvm/config.hcl (~/.config/gpuvm/config.hcl), readable by
you only (mode 0600). Later commands use them when --url/--token and
$GPUVM_URL/$GPUVM_TOKEN are not given.
` + exitHelp,
		Example: "  gpuvm login https://gpu.example:8443 --sso\n  gpuvm login https://gpu.example:8443 --user alice\n  gpuvm login https://gpu.example:8443 < ~/gpuvm.token",
		Args:    exactArgs(1, "the server's URL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n := btoi(user != "") + btoi(token != "") + btoi(sso); n > 1 {
				return usageError{errors.New("give one of --user (a password), --sso (the OpenID provider) and --token")}
			}
			if sso {
				return runSSOLogin(cmd, getenv, args[0])
			}
			if user != "" {
				return runPasswordLogin(cmd, getenv, args[0], user)
			}
			return runLogin(cmd, getenv, args[0], token)
		},
	}
	cmd.Flags().StringVar(&token, "token", "", "the API token (default: read from the standard input)")
	cmd.Flags().StringVar(&user, "user", "", "sign in as this directory user; the password is asked (or read from the standard input)")
	cmd.Flags().BoolVar(&sso, "sso", false, "sign in with the server's OpenID provider (the device code, or this computer's browser)")
	return cmd
}

// readPassword reads a password: on a terminal without echo, else one line
// of the standard input (its line ending cut, nothing else).
func readPassword(cmd *cobra.Command, prompt string) (string, error) {
	t := terminalOf(cmd)
	if f, ok := t.in.(*os.File); ok && t.inTTY {
		fmt.Fprint(cmd.ErrOrStderr(), prompt)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return "", fmt.Errorf("read the password: %w", err)
		}
		return string(b), nil
	}
	line, err := bufio.NewReader(t.in).ReadString('\n')
	if err != nil && line == "" {
		return "", usageError{errors.New("no password: type it on a terminal or give it on the standard input")}
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func runPasswordLogin(cmd *cobra.Command, getenv func(string) string, url, user string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	c, err := client.New(url, "")
	if err != nil {
		return usageError{err}
	}
	c.UserAgent = "gpuvm/" + version
	path, err := configPath(getenv)
	if err != nil {
		return err
	}
	password, err := readPassword(cmd, fmt.Sprintf("Password of %s at %s: ", user, c.URL()))
	if err != nil {
		return err
	}
	if password == "" {
		return usageError{errors.New("the password is empty")}
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeoutLogin)
	defer cancel()
	res, err := c.Login(ctx, user, password)
	if client.IsUnauthenticated(err) {
		fmt.Fprintf(stderr, "gpuvm: %s: the username or password is wrong\n", c.URL())
		return exitError{exitNoServer}
	}
	if err != nil {
		return explain(err, c, stderr)
	}
	if err := writeClientConfig(path, clientConfig{URL: c.URL(), Token: res.Token}); err != nil {
		return fmt.Errorf("save the session token: %w", err)
	}
	fmt.Fprintf(stdout, "Signed in to %s as %s%s until %s. Saved in %s.\n", c.URL(), res.User.Name, groupsText(res.User),
		res.ExpiresAt.Local().Format("2006-01-02 15:04 MST"), path)
	return nil
}

func newLogoutCmd(getenv func(string) string) *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "End the session of 'gpuvm login --user' or '--sso' and forget its token",
		Long: `Ends the session that 'gpuvm login URL --user NAME' or '--sso' saved (POST
/v1/logout) and removes its token from $XDG_CONFIG_HOME/gpuvm/config.hcl; the URL
stays. A saved API token (from 'gpuvm login URL' with a token) is only
forgotten: revoke it with 'gpuvm admin tokens revoke USER ID' if it must stop working.
` + exitHelp,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := configPath(getenv)
			if err != nil {
				return err
			}
			cf, err := readClientConfig(path)
			if err != nil {
				return err
			}
			if cf.Token == "" {
				fmt.Fprintln(cmd.OutOrStdout(), "Not logged in: no token saved in "+path+".")
				return nil
			}
			c, err := client.New(cf.URL, cf.Token)
			if err != nil {
				return usageError{err}
			}
			c.UserAgent = "gpuvm/" + version
			ctx, cancel := context.WithTimeout(cmd.Context(), timeoutLogin)
			defer cancel()
			err = c.Logout(ctx)
			var what string
			p, isProblem := client.AsProblem(err)
			switch {
			case err == nil:
				what = "session ended"
			case client.IsUnauthenticated(err):
				what = "the session had ended already"
			case isProblem && p.Status == 422:
				what = "the saved token is an API token, which still works until revoked ('gpuvm admin tokens revoke USER ID')"
			default:
				return explain(err, c, cmd.ErrOrStderr())
			}
			cf.Token = ""
			if err := writeClientConfig(path, cf); err != nil {
				return fmt.Errorf("forget the token: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Logged out of %s: %s; the token is no longer saved in %s.\n", c.URL(), what, path)
			return nil
		},
	}
}

// groupsText is ", groups: a (ldap), b (local)", or "" for none.
func groupsText(u api.User) string {
	if len(u.Memberships) == 0 {
		if len(u.Groups) == 0 {
			return ""
		}
		return ", groups: " + strings.Join(u.Groups, ", ")
	}
	parts := make([]string, len(u.Memberships))
	for i, m := range u.Memberships {
		parts[i] = m.Group + " (" + m.Source + ")"
	}
	return ", groups: " + strings.Join(parts, ", ")
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

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// timeoutSSO bounds the whole device sign-in: the provider's codes live
// ten minutes at most (pkg/auth/oidc).
const timeoutSSO = 11 * time.Minute

func runSSOLogin(cmd *cobra.Command, getenv func(string) string, url string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	c, err := client.New(url, "")
	if err != nil {
		return usageError{err}
	}
	c.UserAgent = "gpuvm/" + version
	path, err := configPath(getenv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeoutSSO)
	defer cancel()
	m, err := c.AuthMethods(ctx)
	if err != nil {
		return explain(err, c, stderr)
	}
	if !m.OIDC {
		fmt.Fprintf(stderr, "gpuvm: %s offers no OpenID Connect sign-in (server.auth.oidc); use --user or a token\n", c.URL())
		return exitError{exitNoServer}
	}
	if !m.OIDCDevice {
		return runLoopbackLogin(ctx, cmd, c, path)
	}
	d, err := c.DeviceLogin(ctx)
	if err != nil {
		return explain(err, c, stderr)
	}
	fmt.Fprintf(stderr, "To sign in, open %s and type the code %s", d.VerificationURI, d.UserCode)
	if d.VerificationURIComplete != "" {
		fmt.Fprintf(stderr, "\n(or open %s)", d.VerificationURIComplete)
	}
	fmt.Fprintf(stderr, "\nWaiting until %s…\n", d.ExpiresAt.Local().Format("15:04"))
	for {
		res, err := c.DevicePoll(ctx, d.ID)
		if client.IsUnauthenticated(err) {
			fmt.Fprintf(stderr, "gpuvm: %s: the sign-in with the OpenID provider failed or expired\n", c.URL())
			return exitError{exitNoServer}
		}
		if err != nil {
			return explain(err, c, stderr)
		}
		if res == nil { // the server waited already
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		return saveSession(stdout, c, path, res)
	}
}

func saveSession(stdout io.Writer, c *client.Client, path string, res *api.LoginResponse) error {
	if err := writeClientConfig(path, clientConfig{URL: c.URL(), Token: res.Token}); err != nil {
		return fmt.Errorf("save the session token: %w", err)
	}
	fmt.Fprintf(stdout, "Signed in to %s as %s%s until %s. Saved in %s.\n", c.URL(), res.User.Name, groupsText(res.User),
		res.ExpiresAt.Local().Format("2006-01-02 15:04 MST"), path)
	return nil
}

// loopbackPage is what the browser shows once it has brought the code.
const loopbackPage = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>gpuvm</title></head>
<body><p>%s</p></body></html>`

// runLoopbackLogin signs in by a loopback redirect (RFC 8252): a listener
// on 127.0.0.1, a sign-in URL opened in the browser (or printed), the
// one-time code that comes back traded with the PKCE verifier.
func runLoopbackLogin(ctx context.Context, cmd *cobra.Command, c *client.Client, path string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen on 127.0.0.1 for the sign-in's redirect: %w", err)
	}
	defer ln.Close()
	verifier, state := oauth2.GenerateVerifier(), oauth2.GenerateVerifier()
	redirect := "http://" + ln.Addr().String() + "/callback"
	codes := make(chan string, 1) // "" when the server refused
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if r.URL.Path != "/callback" || q.Get("state") != state || q.Get("code") == "" && q.Get("error") == "" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, loopbackPage, "This is not the sign-in gpuvm is waiting for.")
			return
		}
		if q.Get("error") != "" {
			fmt.Fprintf(w, loopbackPage, "The sign-in failed: go back to the terminal.")
		} else {
			fmt.Fprintf(w, loopbackPage, "Signed in: you may close this tab and go back to the terminal.")
		}
		select {
		case codes <- q.Get("code"):
		default:
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		// Gracefully: the browser gets the whole page the handler wrote
		// before it told us the code, even when we are done at once.
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
	}()
	start := c.OIDCStartURL(redirect, oauth2.S256ChallengeFromVerifier(verifier), state)
	fmt.Fprintf(stderr, "To sign in, open this URL in a browser on this computer:\n%s\n", start)
	if err := consoleSeamsOf(cmd).open(start); err != nil {
		fmt.Fprintf(stderr, "(the browser could not be opened: %v)\n", err)
	}
	fmt.Fprintf(stderr, "Waiting for the sign-in (%s)…\n", timeoutSSO)
	var code string
	select {
	case code = <-codes:
		if code == "" {
			fmt.Fprintf(stderr, "gpuvm: %s: the sign-in with the OpenID provider failed\n", c.URL())
			return exitError{exitNoServer}
		}
	case <-ctx.Done():
		fmt.Fprintf(stderr, "gpuvm: %s: the sign-in did not come back in time\n", c.URL())
		return exitError{exitNoServer}
	}
	res, err := c.OIDCToken(ctx, code, verifier)
	if client.IsUnauthenticated(err) {
		fmt.Fprintf(stderr, "gpuvm: %s: the sign-in with the OpenID provider failed or expired\n", c.URL())
		return exitError{exitNoServer}
	}
	if err != nil {
		return explain(err, c, stderr)
	}
	return saveSession(stdout, c, path, res)
}
