package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
)

// gpuvm desktop (and gpuvm rdp): the way people work on a VM, as its
// profile's desktop block says and GET /v1/vms/{id}/console answers: the
// display console (vnc, spice: as gpuvm console), or a server in the guest
// reached through gpuvmd's tunnels (rdp, sunshine, dcv).

type desktopOpts struct {
	tunnel     tunnelOpts
	print      bool
	noOpen     bool
	rdpFile    string
	user       string
	pin        string
	authToken  string
	out        outputOpts
	clientArgs []string
	getenv     func(string) string
	// rdpOnly: gpuvm rdp, which opens RDP whatever the profile says.
	rdpOnly bool
}

func (o *desktopOpts) flags(cmd *cobra.Command) {
	o.tunnel.flags(cmd)
	f := cmd.Flags()
	f.BoolVar(&o.print, "print", false, "print the local address (DCV: the links) and keep the tunnel open; start nothing, write no file")
	f.BoolVar(&o.noOpen, "no-open", false, "RDP: write the .rdp file and print its path; start no client")
	f.StringVar(&o.rdpFile, "rdp-file", "", "RDP: write the .rdp file (pointing at the local tunnel) to PATH instead of starting a client")
	f.StringVar(&o.user, "user", "", "the user name: RDP's (in the .rdp file, FreeRDP's /u:; default $GPUVM_DESKTOP_USER, else the guest's user), Sunshine's web UI (default $GPUVM_DESKTOP_USER)")
}

func desktopArgs(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	if len(args) < 1 || dash == 0 || dash > 1 || dash == -1 && len(args) > 1 {
		return usageError{fmt.Errorf("%s takes one VM name or ID, then optionally -- and the RDP client's arguments (see '%s --help')", cmd.CommandPath(), cmd.CommandPath())}
	}
	return nil
}

func newDesktopCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	d := desktopOpts{getenv: getenv}
	cmd := &cobra.Command{
		Use:   "desktop VM [-- RDP CLIENT ARGUMENTS]",
		Short: "Open a VM's desktop as its profile says: RDP, Sunshine, DCV or the display console",
		Long: `Opens the desktop of a running VM (by name or ID) the way its profile's
desktop block says (GET /v1/vms/{id}/console answers it):

  - rdp: forwards a local port to the guest's RDP port through gpuvmd (as
    'gpuvm tunnel' does) and starts FreeRDP (xfreerdp, wlfreerdp) when it is
    installed, with the arguments after --; else writes an .rdp file for the
    tunnel (readable by you only) and opens it: with open on macOS, mstsc on
    Windows, the desktop's handler (Remmina) elsewhere. --rdp-file PATH
    writes the file there and starts nothing. Both log in as the guest's user
    (the account gpuvm made for you in the guest, as in GET
    /v1/vms/{id}/desktop.rdp) unless --user or $GPUVM_DESKTOP_USER names
    another; the password is the VM's ('gpuvm credentials VM');
  - sunshine: forwards Sunshine's TCP ports (HTTPS, HTTP, web UI, RTSP) and
    UDP ports (video, control, audio) to the same ports on 127.0.0.1; add the
    host 127.0.0.1 in Moonlight. --pin NNNN pairs it: gpuvm runs
    'moonlight pair 127.0.0.1 --pin NNNN' when Moonlight is installed, and
    gives the PIN to Sunshine's API (POST /api/pin through the tunnel to its
    web UI port, with the web UI's user, --user or $GPUVM_DESKTOP_USER, and
    password, $GPUVM_DESKTOP_PASSWORD or typed in);
  - dcv: forwards a local port to DCV's and prints the web client's URL
    (https://127.0.0.1:PORT/#SESSION, opened in the browser) and the dcv://
    link of DCV's native client; --auth-token adds a DCV authentication
    token to both;
  - vnc, spice: the display console, as 'gpuvm console' does.

--print starts nothing and writes no file: it prints the local address (DCV:
the links) and keeps the tunnels open. --json prints the console answer
(api.ConsoleResponse) and ends. Keep gpuvm running while you use the desktop;
Ctrl-C ends the tunnels (or closing FreeRDP).
` + connectionHelp + "\n" + exitHelp,
		Example: "  gpuvm desktop render-1\n  gpuvm desktop render-1 --rdp-file render-1.rdp --local-port 13389\n" +
			"  gpuvm desktop stream-1 --pin 1234 --user gpuvm\n  gpuvm desktop render-1 -- /cert:tofu /dynamic-resolution",
		Args: desktopArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			d.clientArgs = args[1:]
			return runDesktop(ctx, c, cmd, args[0], d)
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	d.flags(cmd)
	cmd.Flags().StringVar(&d.pin, "pin", "", "Sunshine: pair Moonlight with this 4-digit PIN")
	cmd.Flags().StringVar(&d.authToken, "auth-token", "", "DCV: an authentication token from the guest's DCV, added to the links")
	d.out.flags(cmd, "")
	return cmd
}

func newRDPCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	d := desktopOpts{getenv: getenv, rdpOnly: true}
	cmd := &cobra.Command{
		Use:   "rdp VM [-- RDP CLIENT ARGUMENTS]",
		Short: "Open a VM's Remote Desktop (RDP) through gpuvmd",
		Long: `'gpuvm desktop' for RDP, whatever the VM's profile says: forwards a local
port to the guest's RDP port (the profile's desktop port, else 3389) through
gpuvmd, and starts FreeRDP (xfreerdp, wlfreerdp) when it is installed, with
the arguments after --; else writes an .rdp file for the tunnel (readable by
you only) and opens it with the desktop's RDP client (open on macOS, mstsc on
Windows, Remmina through xdg-open on Linux). Keep gpuvm running while you use
the desktop; Ctrl-C ends the tunnel.

It logs in as the guest's user (the account gpuvm made for you in the guest,
as in GET /v1/vms/{id}/desktop.rdp); --user, else $GPUVM_DESKTOP_USER, names
another (Administrator). The password is the VM's: 'gpuvm credentials VM'.

--no-open writes the file and prints its path only; --rdp-file PATH writes it
there; --print prints the local address only.
` + connectionHelp + "\n" + exitHelp,
		Example: "  gpuvm rdp win11-1 --user Administrator\n  gpuvm rdp win11-1 --rdp-file win11.rdp --local-port 13389",
		Args:    desktopArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			d.clientArgs = args[1:]
			return runDesktop(ctx, c, cmd, args[0], d)
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	d.flags(cmd)
	return cmd
}

// errClientDone ends a tunnel whose client (FreeRDP) has ended.
var errClientDone = errors.New("the client ended")

func runDesktop(ctx context.Context, c *client.Client, cmd *cobra.Command, ref string, o desktopOpts) error {
	if err := o.tunnel.check(); err != nil {
		return err
	}
	if o.pin != "" && !pinPattern.MatchString(o.pin) {
		return usageError{fmt.Errorf("--pin %q is not a 4-digit PIN (Moonlight's)", o.pin)}
	}
	con, err := c.Console(ctx, ref)
	if err != nil {
		return err
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if o.out.json {
		return writeJSON(stdout, con)
	}
	d := con.Desktop
	if d == nil { // the VM's profile is gone: its display, as before
		d = &api.Desktop{Protocol: con.Protocol}
	}
	if o.rdpOnly && d.Protocol != api.DesktopRDP {
		fmt.Fprintf(stderr, "The desktop of %s is %s; trying RDP on port 3389 of the guest.\n", ref, d.Protocol)
		d = &api.Desktop{Protocol: api.DesktopRDP, Ports: []api.DesktopPort{{Port: 3389, Transport: "tcp", Use: "rdp"}}}
	}
	for _, n := range con.Notes {
		fmt.Fprintln(stderr, "Note:", n)
	}
	if len(o.clientArgs) > 0 && d.Protocol != api.DesktopRDP {
		return usageError{fmt.Errorf("arguments after -- go to the RDP client; the desktop of %s is %s", ref, d.Protocol)}
	}
	// What gpuvm says for people goes to stderr (the tunnel's message
	// too); stdout carries only what --print and the files promise.
	cmd.SetOut(stderr)
	defer cmd.SetOut(stdout)
	seams := consoleSeamsOf(cmd)
	switch d.Protocol {
	case api.DesktopVNC, api.DesktopSPICE:
		cmd.SetOut(stdout)
		return runConsole(ctx, c, cmd, ref, consoleOpts{print: o.print})
	case api.DesktopRDP:
		return runDesktopRDP(ctx, c, cmd, stdout, ref, con.VMID, d, o, seams)
	case api.DesktopSunshine:
		return runDesktopSunshine(ctx, c, cmd, stdout, ref, con.VMID, d, o, seams)
	case api.DesktopDCV:
		return runDesktopDCV(ctx, c, cmd, stdout, ref, d, o, seams)
	case api.DesktopNone:
		fmt.Fprintf(stderr, "gpuvm: VM %s has neither a display nor a desktop: reach its guest with 'gpuvm ssh %s' or 'gpuvm tunnel %s PORT'.\n", ref, ref, ref)
		return exitError{exitFailure}
	}
	return fmt.Errorf("the desktop of %s is %q, which this gpuvm does not know (is it older than the server?)", ref, d.Protocol)
}

// desktopPort is the guest's port of the desktop for use, else def.
func desktopPort(d *api.Desktop, use string, def int) int {
	for _, p := range d.Ports {
		if p.Use == use {
			return p.Port
		}
	}
	return def
}

// tunnelTo is runTunnel to a port of the desktop server, with a refusal
// that says what does not answer.
func tunnelTo(ctx context.Context, c *client.Client, cmd *cobra.Command, ref, protocol, use string, port int, t tunnelOpts, ready func(addr string) error) error {
	_, err := runTunnel(ctx, c, cmd, ref, port, t, ready)
	if p, ok := client.AsProblem(err); ok && p.Status == http.StatusBadGateway {
		return errors.New(desktopUnreachable(p, ref, protocol, use, port))
	}
	if errors.Is(err, errClientDone) {
		return nil
	}
	return err
}

// desktopUnreachable says why a desktop server's port could not be
// reached (the tunnel's 502) and what to look at: the guest's refusal
// already says that nothing listens there.
func desktopUnreachable(p *client.Problem, ref, protocol, use string, port int) string {
	what := strconv.Itoa(port)
	if use != protocol {
		what += " (" + use + ")"
	}
	said := p.Detail
	if p.Kind() != "guest-refused" {
		said += ": nothing answers on port " + what + " of the guest"
	}
	return fmt.Sprintf("%s: is the %s server installed and running there? cloud-init may still be setting it up (see docs/config.md, \"Desktops in the guest\"; 'gpuvm ssh %s' to look)",
		said, desktopServer[protocol], ref)
}

var desktopServer = map[string]string{
	api.DesktopRDP:      "RDP (xrdp, or Windows' Remote Desktop)",
	api.DesktopSunshine: "Sunshine",
	api.DesktopDCV:      "DCV",
}

// rdpClients are the RDP clients gpuvm starts itself, first found first:
// FreeRDP runs with /v:ADDR and ends the command when it ends; open and
// mstsc open the .rdp file.
func rdpClients() []string {
	switch runtime.GOOS {
	case "darwin":
		return []string{"open"}
	case "windows":
		return []string{"mstsc"}
	}
	return []string{"xfreerdp3", "xfreerdp", "wlfreerdp3", "wlfreerdp"}
}

func isFreeRDP(path string) bool {
	return strings.Contains(strings.ToLower(filepath.Base(path)), "freerdp")
}

// rdpUser is the user RDP logs in as: --user, else $GPUVM_DESKTOP_USER,
// else the guest's user: the account cloud-init made for the VM's owner, the
// user of GET /v1/vms/{id}/desktop.rdp (and of 'gpuvm ssh').
func rdpUser(ctx context.Context, c *client.Client, vmID string, o desktopOpts) (string, error) {
	if o.user != "" {
		return o.user, nil
	}
	if u := o.getenv("GPUVM_DESKTOP_USER"); u != "" {
		return u, nil
	}
	vm, err := c.GetVM(ctx, vmID)
	if err != nil {
		return "", fmt.Errorf("find the guest's user of VM %s: %w", vmID, err)
	}
	return cloudinit.LoginName(vm.Owner), nil
}

// freeRDPArgs are FreeRDP's arguments for a server at addr, logging in as
// user, then the person's own (after --).
func freeRDPArgs(addr, user string, extra []string) []string {
	args := []string{"/v:" + addr}
	if user != "" {
		args = append(args, "/u:"+user)
	}
	return append(args, extra...)
}

func runDesktopRDP(ctx context.Context, c *client.Client, cmd *cobra.Command, stdout io.Writer, ref, vmID string, d *api.Desktop, o desktopOpts, seams consoleSeams) error {
	stderr := cmd.ErrOrStderr()
	port := desktopPort(d, "rdp", 3389)
	user := ""
	if !o.print {
		var err error
		if user, err = rdpUser(ctx, c, vmID, o); err != nil {
			return err
		}
	}
	rdpClient := ""
	if !o.print && !o.noOpen && o.rdpFile == "" {
		for _, name := range rdpClients() {
			if p, err := seams.lookPath(name); err == nil {
				rdpClient = p
				break
			}
		}
	}
	if len(o.clientArgs) > 0 && !isFreeRDP(rdpClient) {
		return usageError{errors.New("arguments after -- go to FreeRDP, which is not what gpuvm starts here (installed? --print, --no-open or --rdp-file?)")}
	}
	var tmp string
	defer func() {
		if tmp != "" {
			os.Remove(tmp)
		}
	}()
	return tunnelTo(ctx, c, cmd, ref, api.DesktopRDP, "rdp", port, o.tunnel, func(addr string) error {
		switch {
		case o.print:
			_, err := fmt.Fprintln(stdout, addr)
			return err
		case isFreeRDP(rdpClient):
			args := freeRDPArgs(addr, user, o.clientArgs)
			fmt.Fprintf(stderr, "Starting %s on %s as %s (through gpuvmd); close it to end.\n", filepath.Base(rdpClient), addr, user)
			code, err := seams.run(ctx, rdpClient, args, os.Environ(), nil, stdout, stderr)
			if err != nil {
				return fmt.Errorf("run %s: %w", rdpClient, err)
			}
			if code != 0 && ctx.Err() == nil {
				fmt.Fprintf(stderr, "gpuvm: %s ended with status %d\n", filepath.Base(rdpClient), code)
				return exitError{exitFailure}
			}
			return errClientDone
		}
		data := rdpFileFor(d, addr, user)
		path := o.rdpFile
		if path == "" {
			p, err := writePrivate(seams.tempDir, "gpuvm-*.rdp", data)
			if err != nil {
				return err
			}
			path, tmp = p, p
		} else if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "RDP file: %s\n", path)
		switch {
		case o.noOpen || o.rdpFile != "":
			fmt.Fprintf(stderr, "Open it with your RDP client (or connect it to %s) while gpuvm runs; Ctrl-C ends the tunnel.\n", addr)
		case rdpClient != "": // open (macOS), mstsc (Windows): they take the file
			fmt.Fprintf(stderr, "Opening it with %s; Ctrl-C ends the tunnel.\n", filepath.Base(rdpClient))
			go func() {
				if _, err := seams.run(ctx, rdpClient, []string{path}, os.Environ(), nil, io.Discard, io.Discard); err != nil && ctx.Err() == nil {
					fmt.Fprintf(stderr, "gpuvm: %s: %v; open the file with your RDP client.\n", filepath.Base(rdpClient), err)
				}
			}()
		default:
			if err := seams.open(path); err != nil {
				fmt.Fprintf(stderr, "No RDP client found (FreeRDP: xfreerdp, wlfreerdp), and the file cannot be opened (%v): open it with your RDP client, or connect it to %s.\n", err, addr)
			} else {
				fmt.Fprintf(stderr, "Opened it with the desktop's RDP client; Ctrl-C ends the tunnel.\n")
			}
		}
		return nil
	})
}

// rdpFileFor is the server's suggested .rdp file (rdp_file) pointed at
// addr, with the user name when given.
func rdpFileFor(d *api.Desktop, addr, user string) []byte {
	src := d.RDPFile
	if src == "" {
		src = "full address:s:\r\nprompt for credentials:i:1\r\nscreen mode id:i:1\r\nauthentication level:i:2\r\n"
	}
	user = strings.NewReplacer("\r", "", "\n", "").Replace(user)
	var b strings.Builder
	for _, line := range strings.SplitAfter(src, "\n") {
		switch {
		case line == "":
		case strings.HasPrefix(line, "full address:s:"):
			fmt.Fprintf(&b, "full address:s:%s\r\n", addr)
			if user != "" {
				fmt.Fprintf(&b, "username:s:%s\r\n", user)
			}
		case strings.HasPrefix(line, "username:s:") && user != "":
		default:
			b.WriteString(line)
		}
	}
	return []byte(b.String())
}

func runDesktopDCV(ctx context.Context, c *client.Client, cmd *cobra.Command, stdout io.Writer, ref string, d *api.Desktop, o desktopOpts, seams consoleSeams) error {
	port := desktopPort(d, "dcv", 8443)
	session := d.Session
	if session == "" {
		session = "console"
	}
	return tunnelTo(ctx, c, cmd, ref, api.DesktopDCV, "dcv", port, o.tunnel, func(addr string) error {
		web, link := dcvLinks(addr, session, o.authToken)
		fmt.Fprintln(stdout, web)
		fmt.Fprintln(stdout, link)
		if o.print || o.noOpen {
			return nil
		}
		if err := seams.open(web); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "Cannot open a browser (%v): open the web URL above, or the dcv:// link with DCV's client, while gpuvm runs.\n", err)
		} else {
			fmt.Fprintf(cmd.ErrOrStderr(), "Opened DCV's web client in your browser (DCV's own certificate: your browser asks about it); the dcv:// link opens DCV's client. Ctrl-C ends the tunnel.\n")
		}
		return nil
	})
}

// dcvLinks are DCV's web client URL and native client link for a server at
// addr: https://ADDR/[?authToken=T]#SESSION, dcv://ADDR/[?authToken=T]#SESSION.
func dcvLinks(addr, session, token string) (web, link string) {
	q := ""
	if token != "" {
		q = "?authToken=" + urlQueryEscape(token)
	}
	rest := addr + "/" + q + "#" + session
	return "https://" + rest, "dcv://" + rest
}

func urlQueryEscape(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "#", "%23", "+", "%2B", " ", "%20", "?", "%3F").Replace(s)
}

// pinPattern is a Moonlight PIN.
var pinPattern = regexp.MustCompile(`^[0-9]{4}$`)

// openUDPForwards forwards each UDP port of the VM's guest to the same
// port on bind through gpuvmd (POST /v1/vms/{id}/tunnel with protocol
// udp, as 'gpuvm tunnel VM PORT/udp' does) until ctx ends: udpForwards. A
// variable, so that tests can see what gpuvm desktop asks for.
var openUDPForwards = udpForwards

// vmDesktopCredentials are the VM's one-time desktop credentials (user and
// password, POST /v1/vms/{id}/credentials), which cloud-init set in the
// guest; profile.desktop.credentials = "vm". They can be read once: pairing
// spends them, and says so.
var vmDesktopCredentials = func(ctx context.Context, c *client.Client, vmID string) (user, password string, err error) {
	cr, err := c.Credentials(ctx, vmID)
	if err != nil {
		return "", "", fmt.Errorf("the VM's one-time desktop credentials: %w", err)
	}
	return cr.User, cr.Password, nil
}

// Moonlight's command-line client (moonlight-qt), which pairs with a PIN
// given: moonlight pair HOST --pin NNNN.
const moonlightProgram = "moonlight"

// sunshinePairTimeout bounds how long gpuvm offers the PIN to Sunshine,
// which takes it only while Moonlight waits for pairing.
var sunshinePairTimeout = 2 * time.Minute

func runDesktopSunshine(ctx context.Context, c *client.Client, cmd *cobra.Command, stdout io.Writer, ref, vmID string, d *api.Desktop, o desktopOpts, seams consoleSeams) error {
	stderr := cmd.ErrOrStderr()
	var tcp, udp []int
	for _, p := range d.Ports {
		if p.Transport == "udp" {
			udp = append(udp, p.Port)
		} else {
			tcp = append(tcp, p.Port)
		}
	}
	web := desktopPort(d, "web", 47990)
	if o.tunnel.localPort != 0 {
		return usageError{errors.New("--local-port does not apply to Sunshine: Moonlight reaches each port at its own number, so the local ports are the guest's")}
	}
	// Credentials first: nothing is opened for a pairing that cannot be
	// done.
	var user, password string
	if o.pin != "" {
		var err error
		if user, password, err = sunshineCredentials(ctx, c, cmd, vmID, d, o); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	use := map[int]string{}
	for _, p := range d.Ports {
		use[p.Port] = p.Use
	}
	errs := make(chan error, len(tcp))
	started := 0
	wait := func() {
		cancel()
		for ; started > 0; started-- {
			<-errs
		}
	}
	defer wait()
	for _, port := range tcp {
		t := o.tunnel
		t.localPort = port
		ready := make(chan struct{})
		started++
		go func() {
			errs <- tunnelTo(ctx, c, cmd, ref, api.DesktopSunshine, use[port], port, t, func(string) error { close(ready); return nil })
		}()
		select {
		case <-ready:
		case err := <-errs:
			started--
			if err == nil {
				err = ctx.Err()
			}
			return err
		}
	}
	host := o.tunnel.bind
	udpErr := openUDPForwards(ctx, c, cmd, ref, udp, host)
	if udpErr != nil {
		udpErr = fmt.Errorf("Moonlight's video, control and audio (UDP %s) need UDP tunnels: %w", joinInts(udp), udpErr)
		if o.pin == "" {
			return udpErr
		}
	}
	if o.print {
		fmt.Fprintln(stdout, host)
	}
	fmt.Fprintf(stderr, "Sunshine of %s is on %s (TCP %s). In Moonlight, add the host %s.\n", ref, host, joinInts(tcp), host)
	if o.pin == "" {
		fmt.Fprintf(stderr, "To pair: start pairing in Moonlight, then type the PIN it shows in Sunshine's web UI, https://%s/pin (its user and password), or run 'moonlight pair %s --pin NNNN' and 'gpuvm desktop %s --pin NNNN' instead of this.\n",
			net.JoinHostPort(host, strconv.Itoa(web)), host, ref)
	} else {
		if ml, err := seams.lookPath(moonlightProgram); err == nil {
			fmt.Fprintf(stderr, "Running 'moonlight pair %s --pin %s'.\n", host, o.pin)
			go func() {
				_, _ = seams.run(ctx, ml, []string{"pair", host, "--pin", o.pin}, os.Environ(), nil, io.Discard, stderr)
			}()
		} else {
			fmt.Fprintf(stderr, "Start pairing with %s in Moonlight now, with the PIN %s (moonlight pair %s --pin %s).\n", host, o.pin, host, o.pin)
		}
		if err := pairSunshine(ctx, "https://"+net.JoinHostPort(host, strconv.Itoa(web))+"/api/pin", user, password, o.pin); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "Sunshine took the PIN: Moonlight is paired with %s.\n", ref)
	}
	if udpErr != nil {
		return udpErr
	}
	fmt.Fprintln(stderr, "Ctrl-C ends the tunnels.")
	<-ctx.Done()
	return nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// sunshineCredentials are the web UI's user and password, from where the
// profile says.
func sunshineCredentials(ctx context.Context, c *client.Client, cmd *cobra.Command, vmID string, d *api.Desktop, o desktopOpts) (string, string, error) {
	if d.Credentials == "vm" {
		user, password, err := vmDesktopCredentials(ctx, c, vmID)
		if err == nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "Pairing as %s with the VM's one-time desktop password: it cannot be read again ('gpuvm credentials' will refuse).\n", user)
		}
		return user, password, err
	}
	user := o.user
	if user == "" {
		user = o.getenv("GPUVM_DESKTOP_USER")
	}
	if user == "" {
		return "", "", usageError{errors.New("pairing needs Sunshine's web UI user: --user NAME or $GPUVM_DESKTOP_USER (and its password in $GPUVM_DESKTOP_PASSWORD, or typed in)")}
	}
	password := o.getenv("GPUVM_DESKTOP_PASSWORD")
	if password == "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "Password of Sunshine's web UI user %s (it shows as you type; $GPUVM_DESKTOP_PASSWORD avoids that): ", user)
		line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
		password = strings.TrimRight(line, "\r\n")
		if password == "" {
			return "", "", fmt.Errorf("no password for Sunshine's web UI (%v)", err)
		}
	}
	return user, password, nil
}

// pairSunshine gives Sunshine the PIN (POST /api/pin, basic auth) until it
// takes it: it takes one only while Moonlight waits for pairing. Sunshine's
// web UI has its own certificate, which nothing can verify; the connection
// runs inside gpuvmd's authenticated tunnel to the guest.
func pairSunshine(ctx context.Context, pinURL, user, password, pin string) error {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // Sunshine's self-signed certificate, through gpuvmd's tunnel
	}}
	defer hc.CloseIdleConnections()
	name, _ := os.Hostname()
	body, _ := json.Marshal(map[string]string{"pin": pin, "name": "gpuvm " + name})
	deadline := time.Now().Add(sunshinePairTimeout)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, pinURL, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.SetBasicAuth(user, password)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("Sunshine's API (POST %s through the tunnel): %w", pinURL, err)
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusUnauthorized:
			return fmt.Errorf("Sunshine refused the web UI's user %q and password (401): they are set in the guest ('sunshine --creds USER PASSWORD', see the sunshine template)", user)
		case resp.StatusCode != http.StatusOK:
			return fmt.Errorf("Sunshine's API answered %s: %s", resp.Status, strings.TrimSpace(string(data[:min(len(data), 200)])))
		}
		var ans struct {
			Status json.RawMessage `json:"status"`
		}
		if err := json.Unmarshal(data, &ans); err != nil {
			return fmt.Errorf("Sunshine's API answered what gpuvm does not understand: %.200s", data)
		}
		if s := strings.Trim(string(ans.Status), `"`); s == "true" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Sunshine took no PIN within %s: it takes one only while Moonlight waits for pairing (add the host, pair, then give the PIN)", sunshinePairTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
