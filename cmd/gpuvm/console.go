package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/client"
)

// consoleSeams, in the context, let tests stand in for programs and the
// desktop: which programs exist, running one, opening a URL or file.
type consoleSeams struct {
	lookPath func(file string) (string, error)
	// run runs a program to its end with the given environment and
	// standard streams, and returns its exit status.
	run func(ctx context.Context, path string, args, env []string, stdin io.Reader, stdout, stderr io.Writer) (int, error)
	// open hands a URL or a file to the desktop (xdg-open, open, start).
	open func(target string) error
	// listening is told the address a tunnel listens on.
	listening func(addr string)
	// tempDir is where .vv and .rdp files go ("" the system's).
	tempDir string
	// executable is gpuvm's own path (ssh's ProxyCommand runs it).
	executable func() (string, error)
}

type consoleSeamsKey struct{}

func consoleSeamsOf(cmd *cobra.Command) consoleSeams {
	s := consoleSeams{lookPath: exec.LookPath, run: runProgram, open: openOnDesktop, listening: func(string) {}, executable: os.Executable}
	if t, _ := cmd.Context().Value(consoleSeamsKey{}).(*consoleSeams); t != nil {
		if t.lookPath != nil {
			s.lookPath = t.lookPath
		}
		if t.run != nil {
			s.run = t.run
		}
		if t.open != nil {
			s.open = t.open
		}
		if t.listening != nil {
			s.listening = t.listening
		}
		if t.executable != nil {
			s.executable = t.executable
		}
		s.tempDir = t.tempDir
	}
	return s
}

func runProgram(ctx context.Context, path string, args, env []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, stdin, stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, err
	}
	return 0, nil
}

// openWait is how long openOnDesktop gives the desktop's opener to fail:
// xdg-open (open, rundll32) ends at once once it has handed the target
// over, with a status that says whether it could; one still running then (a
// browser it runs in the foreground) has opened it.
var openWait = 5 * time.Second

// openOnDesktop opens a URL or a file with the desktop's program for it, and
// fails when nothing opened it.
func openOnDesktop(target string) error {
	return openWith(runtime.GOOS, os.Getenv, target)
}

// openWith opens target as openOnDesktop does on goos, with getenv: open on
// macOS, rundll32 on Windows, xdg-open elsewhere, which needs a graphical
// session (DISPLAY or WAYLAND_DISPLAY: an SSH session has neither). It fails
// when there is none, when the program is missing, or when it ends with an
// error within openWait.
func openWith(goos string, getenv func(string) string, target string) error {
	var cmd *exec.Cmd
	switch goos {
	case "darwin":
		cmd = exec.Command("open", target)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", target)
	default:
		if getenv("DISPLAY") == "" && getenv("WAYLAND_DISPLAY") == "" {
			return errors.New("no graphical session here: neither DISPLAY nor WAYLAND_DISPLAY is set (an SSH session?)")
		}
		path, err := exec.LookPath("xdg-open")
		if err != nil {
			return errors.New("xdg-open is not installed")
		}
		cmd = exec.Command(path, target)
	}
	name := filepath.Base(cmd.Path)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s failed: %w", name, err)
		}
		return nil
	case <-time.After(openWait):
		return nil // still running: it has the target
	}
}

// remoteViewer is virt-viewer's client of .vv files.
const remoteViewer = "remote-viewer"

type consoleOpts struct {
	print, browser bool
	out            outputOpts
}

func newConsoleCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var co consoleOpts
	cmd := &cobra.Command{
		Use:   "console VM",
		Short: "Open a VM's display: remote-viewer, else the browser console",
		Long: `Opens the display of a running VM (by name or ID):

  - with remote-viewer (virt-viewer) when it is installed: gpuvm listens on a
    local port, forwards each of the viewer's connections through gpuvmd's
    websocket proxy with a fresh ticket, and hands the viewer a .vv file
    (written readable by you only, deleted by the viewer); gpuvm waits until
    the viewer closes;
  - else in the browser (noVNC, served by gpuvmd), opened with xdg-open or
    open; VNC displays only;
  - else (xdg-open or the browser fails, or on Linux there is no graphical
    session: neither DISPLAY nor WAYLAND_DISPLAY, as over SSH) it prints the
    browser console's URL, and says nothing opened it.

--print only prints the URL (--json: the whole api.ConsoleResponse). A link
carries a one-time ticket: it opens one connection, within a minute.
--browser skips remote-viewer.
` + connectionHelp + "\n" + exitHelp,
		Example: "  gpuvm console render-1\n  gpuvm console render-1 --print",
		Args:    exactArgs(1, "one VM name or ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			return runConsole(ctx, c, cmd, args[0], co)
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	cmd.Flags().BoolVar(&co.print, "print", false, "print the browser console's URL and do nothing else")
	cmd.Flags().BoolVar(&co.browser, "browser", false, "open the browser console even when remote-viewer is installed")
	co.out.flags(cmd, "")
	return cmd
}

func runConsole(ctx context.Context, c *client.Client, cmd *cobra.Command, ref string, co consoleOpts) error {
	if co.out.json && !co.print {
		return usageError{errors.New("--json goes with --print")}
	}
	seams := consoleSeamsOf(cmd)
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if !co.print && !co.browser {
		if viewer, err := seams.lookPath(remoteViewer); err == nil {
			return runViewer(ctx, c, cmd, ref, viewer, seams)
		}
	}
	con, err := c.Console(ctx, ref)
	if err != nil {
		return err
	}
	link := con.BrowserURL
	switch {
	case co.out.json:
		return writeJSON(stdout, con)
	case co.print && link != "":
		_, err := fmt.Fprintln(stdout, link)
		return err
	case co.print:
		fmt.Fprintln(stdout, con.WebSocketURL)
		fmt.Fprintf(stderr, "The display is %s: no browser console; the URL above is its websocket (one connection, within a minute).\n", con.Protocol)
		return nil
	case link == "":
		fmt.Fprintf(stderr, "gpuvm: the display of %s is %s, which only remote-viewer shows: install virt-viewer.\n", ref, con.Protocol)
		return exitError{exitFailure}
	}
	if err := seams.open(link); err != nil {
		fmt.Fprintf(stderr, "Nothing opened the console in a browser (%v): open this link yourself, within a minute (it works once):\n", err)
		_, err := fmt.Fprintln(stdout, link)
		return err
	}
	fmt.Fprintf(stderr, "Opened the console of %s in your browser. Its link works once; run 'gpuvm console %s' again for another.\n", ref, ref)
	return nil
}

// runViewer shows the display in remote-viewer through a local forwarder.
func runViewer(ctx context.Context, c *client.Client, cmd *cobra.Command, ref, viewer string, seams consoleSeams) error {
	vm, err := c.GetVM(ctx, ref)
	if err != nil {
		return err
	}
	vv, err := c.ConsoleVV(ctx, vm.ID)
	if err != nil {
		return err
	}
	f, err := listenForward(ctx, "127.0.0.1:0", cmd.ErrOrStderr(), func(ctx context.Context) (net.Conn, error) {
		conn, _, err := c.DialConsole(ctx, vm.ID)
		return conn, err
	})
	if err != nil {
		return err
	}
	defer f.close()
	port := f.ln.Addr().(*net.TCPAddr).Port
	path, err := writePrivate(seams.tempDir, "gpuvm-*.vv", rewriteVV(vv, "127.0.0.1", port))
	if err != nil {
		return err
	}
	defer os.Remove(path) // the viewer deletes it (delete-this-file=1); this is for a viewer that failed
	fmt.Fprintf(cmd.ErrOrStderr(), "Opening the display of %s in remote-viewer (through gpuvmd, local port %d); close the viewer to end.\n", vm.Name, port)
	code, err := seams.run(ctx, viewer, []string{path}, os.Environ(), nil, cmd.OutOrStdout(), cmd.ErrOrStderr())
	if err != nil {
		return fmt.Errorf("run %s: %w", viewer, err)
	}
	if code != 0 && ctx.Err() == nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "gpuvm: %s ended with status %d\n", remoteViewer, code)
		return exitError{exitFailure}
	}
	return nil
}

// rewriteVV points a .vv file at host:port.
func rewriteVV(vv []byte, host string, port int) []byte {
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(string(vv), "\n") {
		switch k, _, _ := strings.Cut(line, "="); k {
		case "host":
			fmt.Fprintf(&out, "host=%s\n", host)
		case "port":
			fmt.Fprintf(&out, "port=%d\n", port)
		default:
			out.WriteString(line)
		}
	}
	return out.Bytes()
}

// writePrivate writes data to a new file readable by its owner only.
func writePrivate(dir, pattern string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	if err := f.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Close()); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// forwarder accepts local connections and carries each to a fresh
// connection through gpuvmd.
type forwarder struct {
	ln     net.Listener
	dial   func(context.Context) (net.Conn, error)
	stderr io.Writer
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// listenForward listens on addr and forwards every connection with dial
// until ctx ends or close is called.
func listenForward(ctx context.Context, addr string, stderr io.Writer, dial func(context.Context) (net.Conn, error)) (*forwarder, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	f := &forwarder{ln: ln, dial: dial, stderr: stderr, conns: map[net.Conn]bool{}}
	f.ctx, f.cancel = context.WithCancel(ctx)
	f.wg.Add(2)
	go func() { defer f.wg.Done(); <-f.ctx.Done(); ln.Close(); f.closeConns() }()
	go func() { defer f.wg.Done(); f.accept() }()
	return f, nil
}

func (f *forwarder) track(c net.Conn, on bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if on && f.ctx.Err() != nil {
		return false
	}
	if on {
		f.conns[c] = true
	} else {
		delete(f.conns, c)
	}
	return true
}

func (f *forwarder) closeConns() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
	}
}

func (f *forwarder) accept() {
	for {
		local, err := f.ln.Accept()
		if err != nil {
			return
		}
		if !f.track(local, true) {
			local.Close()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.track(local, false)
			defer local.Close()
			dctx, cancel := context.WithTimeout(f.ctx, time.Minute)
			remote, err := f.dial(dctx)
			cancel()
			if err != nil {
				if f.ctx.Err() == nil {
					fmt.Fprintf(f.stderr, "gpuvm: connection from %s refused: %v\n", local.RemoteAddr(), err)
				}
				return
			}
			if !f.track(remote, true) {
				remote.Close()
				return
			}
			defer f.track(remote, false)
			splice(local, remote)
		}()
	}
}

// close stops accepting, ends the connections and waits for them.
func (f *forwarder) close() {
	f.cancel()
	f.wg.Wait()
}

// splice copies a and b into each other until either side ends, then
// closes both.
func splice(a, b io.ReadWriteCloser) {
	done := make(chan struct{}, 2)
	cp := func(dst io.Writer, src io.Reader) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}

type tunnelOpts struct {
	localPort int
	bind      string
	stdio     bool
}

func (t *tunnelOpts) flags(cmd *cobra.Command) {
	cmd.Flags().IntVar(&t.localPort, "local-port", 0, "the local port to listen on (default: one the system picks)")
	cmd.Flags().StringVar(&t.bind, "bind", "127.0.0.1", "the local address to listen on")
}

func (t tunnelOpts) check() error {
	if t.localPort < 0 || t.localPort > 65535 {
		return usageError{fmt.Errorf("--local-port %d is not a port (1–65535, or 0: one the system picks)", t.localPort)}
	}
	if net.ParseIP(t.bind) == nil && t.bind != "localhost" {
		return usageError{fmt.Errorf("--bind %q is not an IP address", t.bind)}
	}
	return nil
}

func newTunnelCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var t tunnelOpts
	cmd := &cobra.Command{
		Use:   "tunnel VM PORT[/udp]",
		Short: "Forward a local port to a port of a VM's guest, through gpuvmd",
		Long: `Listens on a local port (127.0.0.1, --local-port or one the system picks) and
forwards every connection to PORT of the VM's guest: over a websocket to
gpuvmd, which connects to the guest's address. It works wherever gpuvmd can be
reached, even when the VM's network cannot. Each connection takes a fresh
one-time ticket. Ctrl-C stops it.

PORT/udp forwards datagrams instead: gpuvm listens on a local UDP port and
carries every datagram it gets, one websocket message each, through one
tunnel to the guest's UDP port; the guest's datagrams go back to the local
peer that sent last. gpuvmd caps a tunnel's datagram size and rate (the
excess is dropped, as a network drops it) and closes it when idle or when the
guest's port is unreachable; the next datagram then opens a new one.

For an in-guest remote desktop: RDP 3389 ('gpuvm rdp' does it for you),
VNC 5900, NICE DCV 8443 (and 8443/udp for QUIC), PCoIP 4172 and 4172/udp,
Sunshine/Moonlight TCP 47984, 47989, 48010 and UDP 47998-48000, each with
--local-port equal to the port (see the README); for SSH see 'gpuvm ssh'.

--stdio carries one connection over the standard input and output instead
(ssh's ProxyCommand); TCP only.
` + connectionHelp + "\n" + exitHelp,
		Example: "  gpuvm tunnel render-1 3389 --local-port 13389\n  gpuvm tunnel render-1 47998/udp --local-port 47998\n  ssh -o ProxyCommand='gpuvm tunnel --stdio render-1 22' user@render-1",
		Args:    exactArgs(2, "a VM name or ID and a port"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			port, proto, err := parseTunnelPort(args[1])
			if err != nil {
				return err
			}
			if err := t.check(); err != nil {
				return err
			}
			if proto == "udp" {
				if t.stdio {
					return usageError{errors.New("--stdio carries one TCP connection; a UDP tunnel listens on a local UDP port")}
				}
				return runUDPTunnel(ctx, c, cmd, args[0], port, t)
			}
			if t.stdio {
				return runTunnelStdio(ctx, c, cmd, args[0], port)
			}
			_, err = runTunnel(ctx, c, cmd, args[0], port, t, nil)
			return err
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	t.flags(cmd)
	cmd.Flags().BoolVar(&t.stdio, "stdio", false, "carry one connection over standard input and output")
	return cmd
}

// runTunnelStdio carries one connection over stdin and stdout.
func runTunnelStdio(ctx context.Context, c *client.Client, cmd *cobra.Command, ref string, port int) error {
	conn, err := c.DialTunnel(ctx, ref, port)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	splice(conn, stdio{cmd.InOrStdin(), cmd.OutOrStdout()})
	return nil
}

// stdio is standard input and output as one stream; Close ends neither.
type stdio struct {
	io.Reader
	io.Writer
}

func (stdio) Close() error { return nil }

// runTunnel forwards a local port to the guest's port until ctx ends. It
// first opens (and closes) one connection, so that a VM, a guest address or
// a port that cannot be reached says so at once; ready, when not nil, runs
// once it listens.
func runTunnel(ctx context.Context, c *client.Client, cmd *cobra.Command, ref string, port int, t tunnelOpts, ready func(addr string) error) (string, error) {
	probe, err := c.DialTunnel(ctx, ref, port)
	if err != nil {
		return "", err
	}
	probe.Close()
	f, err := listenForward(ctx, net.JoinHostPort(t.bind, strconv.Itoa(t.localPort)), cmd.ErrOrStderr(), func(ctx context.Context) (net.Conn, error) {
		return c.DialTunnel(ctx, ref, port)
	})
	if err != nil {
		return "", err
	}
	defer f.close()
	addr := f.ln.Addr().String()
	fmt.Fprintf(cmd.OutOrStdout(), "Forwarding %s to port %d of VM %s through gpuvmd; Ctrl-C stops.\n", addr, port, ref)
	if ready != nil {
		if err := ready(addr); err != nil {
			return addr, err
		}
	}
	consoleSeamsOf(cmd).listening(addr)
	<-ctx.Done()
	return addr, nil
}

func newSSHCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var user string
	cmd := &cobra.Command{
		Use:   "ssh VM [-- SSH ARGUMENTS]",
		Short: "SSH into a VM's guest through gpuvmd",
		Long: `Runs ssh to the VM's guest, reaching its port 22 through gpuvmd's tunnel
('gpuvm tunnel --stdio VM 22' as ssh's ProxyCommand), so that it works wherever
gpuvmd can be reached. It logs in as the VM's owner, the account cloud-init
made with the SSH keys given at create time, unless -l (or ssh's own -l or
-o User= after --) names another. Arguments after -- go to ssh (a command to
run, -L forwards, ...). gpuvm ends with ssh's exit status.

The guest's host key is checked without a question: gpuvmd made it and put
it in the guest's cloud-init seed before the guest booted, and gpuvm ssh
writes its public half to the VM's own known_hosts file (known_hosts/VM-ID
beside gpuvm's configuration file) and has ssh trust it and no other key
(StrictHostKeyChecking=yes), so a first connection from a script is
verified and silent. For a VM whose key gpuvmd does not know (no cloud-init
seed, made by an older gpuvmd) ssh asks, as it always does, and remembers
the key under the VM's ID; so it does when ssh's own arguments choose the
host key checking (-o StrictHostKeyChecking=..., -o UserKnownHostsFile=...).
` + connectionHelp + "\n" + exitHelp,
		Example: "  gpuvm ssh render-1\n  gpuvm ssh render-1 -l ubuntu -- nvidia-smi",
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if len(args) < 1 || dash == 0 || dash > 1 || dash == -1 && len(args) > 1 {
				return usageError{fmt.Errorf("%s takes one VM name or ID, then -- and ssh's arguments (see '%s --help')", cmd.CommandPath(), cmd.CommandPath())}
			}
			return nil
		},
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			return runSSH(ctx, c, cmd, o, args[0], user, args[1:])
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	cmd.Flags().StringVarP(&user, "login", "l", "", "the user to log in as (default: the VM owner's account, which cloud-init makes)")
	return cmd
}

func runSSH(ctx context.Context, c *client.Client, cmd *cobra.Command, o clientOpts, ref, user string, sshArgs []string) error {
	seams := consoleSeamsOf(cmd)
	sshPath, err := seams.lookPath("ssh")
	if err != nil {
		return fmt.Errorf("ssh is not installed (OpenSSH client): %w", err)
	}
	vm, err := c.GetVM(ctx, ref)
	if err != nil {
		return err
	}
	if vm.State != client.StateRunning {
		fmt.Fprintf(cmd.ErrOrStderr(), "gpuvm: VM %s is %s, not running.\n", vm.Name, vm.State)
		return exitError{exitFailure}
	}
	self, err := seams.executable()
	if err != nil {
		return fmt.Errorf("find gpuvm's own path for ssh's ProxyCommand: %w", err)
	}
	proxy := proxyCommand(self, vm.ID)
	args := []string{"-o", "ProxyCommand=" + proxy, "-o", "HostKeyAlias=" + hostKeyAlias(vm.ID)}
	switch {
	case sshSetsOption(sshArgs, hostKeyOptions...):
		// ssh's arguments choose how the host key is checked.
	case len(vm.SSHHostKeys) == 0:
		fmt.Fprintf(cmd.ErrOrStderr(), "gpuvm: gpuvmd does not know the SSH host key of VM %s (made without a cloud-init seed, or by an older gpuvmd): ssh asks you to check it the first time.\n", vm.Name)
	default:
		pin, err := pinHostKeys(o.getenv, vm.ID, vm.SSHHostKeys)
		if err != nil {
			return err
		}
		args = append(args, pin...)
	}
	if user == "" && !sshNamesUser(sshArgs) {
		// cloud-init made the account of the VM's owner, by this name.
		user = cloudinit.LoginName(vm.Owner)
	}
	if user != "" {
		args = append(args, "-l", user)
	}
	args = append(args, vm.Name)
	args = append(args, sshArgs...)
	// The ProxyCommand's gpuvm finds the server as this one did; flags
	// travel in the environment, never on a command line others can read.
	env := os.Environ()
	if o.url != "" {
		env = append(env, "GPUVM_URL="+o.url)
	} else {
		env = append(env, "GPUVM_URL="+c.URL())
	}
	if o.token != "" {
		env = append(env, "GPUVM_TOKEN="+o.token)
	}
	code, err := seams.run(ctx, sshPath, args, env, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
	if err != nil {
		return fmt.Errorf("run ssh: %w", err)
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}

// sshNamesUser reports whether ssh's arguments choose the login user
// themselves (-l USER, -o User=USER) before the command: ssh takes the first
// it is given, so gpuvm's default must not come before them.
func sshNamesUser(args []string) bool {
	return sshSetsFlag(args, 'l') || sshSetsOption(args, "User")
}

// sshSetsFlag reports whether ssh's arguments, before the command, give
// the flag (one that takes a value).
func sshSetsFlag(args []string, flag byte) bool {
	found := false
	sshFlags(args, func(f byte, _ string) {
		found = found || f == flag
	})
	return found
}

// sshSetsOption reports whether ssh's arguments, before the command, set
// one of the -o options (case-insensitive names).
func sshSetsOption(args []string, names ...string) bool {
	found := false
	sshFlags(args, func(f byte, v string) {
		if f != 'o' {
			return
		}
		k, _, _ := strings.Cut(strings.TrimSpace(v), "=")
		k, _, _ = strings.Cut(k, " ")
		for _, n := range names {
			found = found || strings.EqualFold(k, n)
		}
	})
	return found
}

// sshFlags calls each with every flag of ssh's arguments that takes a
// value, and its value, up to the command.
func sshFlags(args []string, each func(flag byte, value string)) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return // the command: what follows is its own
		}
		// Flags may be grouped (-vvl bob); one that takes a value takes
		// the rest of its word, or the next word.
		for j := 1; j < len(a); j++ {
			if !strings.ContainsRune(sshValueFlags, rune(a[j])) {
				continue
			}
			v := a[j+1:]
			if v == "" && i+1 < len(args) {
				i++
				v = args[i]
			}
			each(a[j], v)
			break
		}
	}
}

// sshValueFlags are OpenSSH's ssh flags that take a value.
const sshValueFlags = "BbcDEeFIiJLlmOoPpQRSWw"

// proxyCommand is ssh's ProxyCommand that tunnels to port 22 of a VM: ssh
// runs it with the user's shell (cmd.exe on Windows) and expands %
// sequences in it.
func proxyCommand(self, vmID string) string {
	quoted := "'" + strings.ReplaceAll(self, "'", `'\''`) + "'"
	if runtime.GOOS == "windows" {
		quoted = `"` + self + `"`
	}
	return strings.ReplaceAll(quoted, "%", "%%") + " tunnel --stdio " + vmID + " 22"
}
