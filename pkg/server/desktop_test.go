package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// desktopTestProfiles join the console tests' configuration: one profile
// per desktop protocol, with and without a GPU.
const desktopTestProfiles = `
profile "rdp-vgpu" {
  boot { kernel = "/k" }
  desktop {
    protocol = "rdp"
  }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
}
template "desk-pw" {
  content = "#cloud-config\npassword: ${password_hash}\n"
}
profile "rdp-3390" {
  boot { kernel = "/k" }
  cloud_init { template = "desk-pw" }
  desktop {
    protocol = "rdp"
    port     = 3390
  }
}
profile "sunshine-headless" {
  boot { kernel = "/k" }
  display {
    type = "none"
  }
  desktop {
    protocol = "sunshine"
    port     = 37989
  }
}
profile "dcv" {
  boot { kernel = "/k" }
  desktop {
    protocol = "dcv"
    session  = "work"
  }
}
profile "vgpu-display" {
  boot { kernel = "/k" }
  display {
    vgpu_display = true
  }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
}
profile "mig" {
  boot { kernel = "/k" }
  gpu {
    kind    = "mig"
    profile = "3g.40gb"
    model   = "H100"
  }
}
`

func dp(port int, transport, use string) api.DesktopPort {
	return api.DesktopPort{Port: port, Transport: transport, Use: use}
}

// vmOf writes a running VM of ann's with the given profile.
func (e *consoleEnv) vmOf(name, profile, state string) *store.VM {
	e.t.Helper()
	ctx := context.Background()
	vm := &store.VM{Name: name, Owner: "ann", Profile: profile, Hours: 1, DisplayPassword: newDisplayPassword()}
	if _, err := e.st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		e.t.Fatal(err)
	}
	vm, err := e.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: state})
	if err != nil {
		e.t.Fatal(err)
	}
	return vm
}

// TestConsoleDesktop: GET /v1/vms/{id}/console follows the profile's
// desktop protocol, and says when the display does not show the GPU.
func TestConsoleDesktop(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{})
	noDisplay := fmt.Errorf("vm x: %w", domain.ErrNoConsole)
	tests := []struct {
		name, profile, state string
		conErr               error
		status               int
		check                func(t *testing.T, c api.ConsoleResponse)
		problem              string
	}{
		{name: "vnc as today", profile: "seat", check: func(t *testing.T, c api.ConsoleResponse) {
			d := c.Desktop
			if c.Protocol != "vnc" || c.Ticket == "" || c.BrowserURL == "" || d == nil || d.Protocol != "vnc" || d.Command != "gpuvm console vnc-as-today" || len(d.Ports) != 0 || d.TunnelURL != "" {
				t.Errorf("%+v %+v", c, d)
			}
			if c.GPUDisplay != "" || c.Notes != nil {
				t.Errorf("a VM without a GPU: %q %q", c.GPUDisplay, c.Notes)
			}
		}},
		{name: "rdp", profile: "rdp-vgpu", check: func(t *testing.T, c api.ConsoleResponse) {
			d := c.Desktop
			if c.Protocol != "vnc" || c.Ticket == "" {
				t.Errorf("the display console is still there: %+v", c)
			}
			if d.Protocol != "rdp" || len(d.Ports) != 1 || d.Ports[0] != (api.DesktopPort{Port: 3389, Transport: "tcp", Use: "rdp"}) ||
				!strings.HasSuffix(d.TunnelURL, "/v1/vms/"+c.VMID+"/tunnel") || d.Command != "gpuvm desktop rdp" || d.LocalHost != "127.0.0.1" {
				t.Errorf("%+v", d)
			}
			if !strings.HasPrefix(d.RDPFile, "full address:s:127.0.0.1:3389\r\n") || !strings.Contains(d.Message, "port 3389") {
				t.Errorf("rdp file %q, message %q", d.RDPFile, d.Message)
			}
			if c.GPUDisplay != "emulated" || len(c.Notes) != 1 || !strings.Contains(c.Notes[0], "does not show a vGPU's framebuffer") || !strings.Contains(c.Notes[0], "(rdp)") {
				t.Errorf("vGPU note: %q %q", c.GPUDisplay, c.Notes)
			}
		}},
		{name: "sunshine without a display", profile: "sunshine-headless", conErr: noDisplay, check: func(t *testing.T, c api.ConsoleResponse) {
			d := c.Desktop
			if c.Protocol != "none" || c.Ticket != "" || c.WebSocketURL != "" || c.VVURL != "" || !c.ExpiresAt.IsZero() {
				t.Errorf("no display, no ticket: %+v", c)
			}
			want := []api.DesktopPort{dp(37984, "tcp", "https"), dp(37989, "tcp", "http"), dp(37990, "tcp", "web"), dp(38010, "tcp", "rtsp"),
				dp(37998, "udp", "video"), dp(37999, "udp", "control"), dp(38000, "udp", "audio")}
			if fmt.Sprint(d.Ports) != fmt.Sprint(want) || d.PairURL != "https://127.0.0.1:37990/api/pin" || d.WebURL != "https://127.0.0.1:37990/" || d.Credentials != "ask" {
				t.Errorf("%+v", d)
			}
			if !strings.Contains(d.Message, "UDP 37998, 37999, 38000") || !strings.Contains(d.Message, "--pin") {
				t.Errorf("message %q", d.Message)
			}
		}},
		{name: "dcv", profile: "dcv", check: func(t *testing.T, c api.ConsoleResponse) {
			d := c.Desktop
			if d.Protocol != "dcv" || d.WebURL != "https://127.0.0.1:8443/#work" || d.Link != "dcv://127.0.0.1:8443/#work" || d.Session != "work" ||
				fmt.Sprint(d.Ports) != fmt.Sprint([]api.DesktopPort{dp(8443, "tcp", "dcv")}) || !strings.Contains(d.Message, "authToken") {
				t.Errorf("%+v", d)
			}
		}},
		{name: "vgpu display", profile: "vgpu-display", check: func(t *testing.T, c api.ConsoleResponse) {
			if c.GPUDisplay != "vgpu" || len(c.Notes) != 1 || !strings.Contains(c.Notes[0], "display='on'") {
				t.Errorf("%q %q", c.GPUDisplay, c.Notes)
			}
		}},
		{name: "mig on the console", profile: "mig", check: func(t *testing.T, c api.ConsoleResponse) {
			if c.GPUDisplay != "emulated" || len(c.Notes) != 1 || !strings.Contains(c.Notes[0], "MIG-backed vGPU's framebuffer") || !strings.Contains(c.Notes[0], "vgpu_display") {
				t.Errorf("%q %q", c.GPUDisplay, c.Notes)
			}
		}},
		{name: "profile gone", profile: "deleted-profile", check: func(t *testing.T, c api.ConsoleResponse) {
			if c.Protocol != "vnc" || c.Desktop != nil || c.GPUDisplay != "" {
				t.Errorf("%+v", c)
			}
		}},
		{name: "vnc without a display", profile: "seat", conErr: noDisplay, status: 409, problem: "no VNC or SPICE display"},
		{name: "rdp not running", profile: "rdp-vgpu", state: store.VMStopped, status: 409, problem: "is stopped, not running"},
		{name: "sunshine not running", profile: "sunshine-headless", state: store.VMQueued, conErr: noDisplay, status: 409, problem: "is queued, not running"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			state := tc.state
			if state == "" {
				state = store.VMRunning
			}
			vm := e.vmOf(strings.ReplaceAll(tc.name, " ", "-"), tc.profile, state)
			e.consoles.mu.Lock()
			e.consoles.conErr = tc.conErr
			e.consoles.mu.Unlock()
			resp, b := e.call("GET", "/v1/vms/"+vm.ID+"/console", "ann-token", "")
			if tc.status == 0 {
				tc.status = 200
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if tc.problem != "" {
				var p api.Problem
				if err := json.Unmarshal(b, &p); err != nil || !strings.Contains(p.Detail, tc.problem) {
					t.Errorf("problem %s", b)
				}
				return
			}
			var c api.ConsoleResponse
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
	e.consoles.mu.Lock()
	e.consoles.conErr = nil
	e.consoles.mu.Unlock()
}

// TestDesktopRDP: GET /v1/vms/{id}/desktop.rdp is the .rdp file of an RDP
// desktop, for the local end of the tunnel at the guest's port, with the
// guest user and never the password; other desktops, other people's VMs and
// deleted VMs are refused, naming what is wrong.
func TestDesktopRDP(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{})
	ctx := context.Background()
	withCred := &store.VM{Name: "win", Owner: "ann", Profile: "rdp-3390", Hours: 1}
	cred := &store.VMCredential{Login: "ann_x", Password: "s3cret-Pass", PasswordHash: "$6$x$y"}
	if _, err := e.st.CreateVM(ctx, withCred, store.CreateVMOptions{RequestedBy: "ann", Credential: cred}); err != nil {
		t.Fatal(err)
	}
	running := e.vmOf("rdp-running", "rdp-vgpu", store.VMRunning) // no credential: the login from the owner's name
	stopped := e.vmOf("rdp-stopped", "rdp-vgpu", store.VMStopped)
	vnc := e.vmOf("vnc-only", "seat", store.VMRunning)
	gone := e.vmOf("gone", "rdp-vgpu", store.VMRunning)
	e.setState(gone, store.VMDeleted)
	tests := []struct {
		name, vm, token string
		status          int
		want            string // the whole file, or a part of the problem's detail
	}{
		{"queued, with its credential", withCred.ID, "ann-token", 200,
			"full address:s:127.0.0.1:3390\r\nusername:s:ann_x\r\nprompt for credentials:i:1\r\nscreen mode id:i:1\r\nauthentication level:i:2\r\n"},
		{"by name", "rdp-running", "ann-token", 200,
			"full address:s:127.0.0.1:3389\r\nusername:s:ann\r\nprompt for credentials:i:1\r\nscreen mode id:i:1\r\nauthentication level:i:2\r\n"},
		{"stopped", stopped.ID, "ann-token", 200,
			"full address:s:127.0.0.1:3389\r\nusername:s:ann\r\nprompt for credentials:i:1\r\nscreen mode id:i:1\r\nauthentication level:i:2\r\n"},
		{"an admin, for ann's VM", running.ID, "admin-token", 200,
			"full address:s:127.0.0.1:3389\r\nusername:s:ann\r\nprompt for credentials:i:1\r\nscreen mode id:i:1\r\nauthentication level:i:2\r\n"},
		{"not an RDP desktop", vnc.ID, "ann-token", 409, `the desktop of VM "vnc-only" is vnc (profile seat), not RDP`},
		{"another user's VM", running.ID, "bob-token", 404, "no VM"},
		{"deleted", gone.ID, "ann-token", 404, "is deleted"},
		{"no such VM", "nope", "ann-token", 404, `no VM "nope"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.call("GET", "/v1/vms/"+tc.vm+"/desktop.rdp", tc.token, "")
			if resp.StatusCode != tc.status {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if tc.status != 200 {
				var p api.Problem
				if err := json.Unmarshal(b, &p); err != nil || !strings.Contains(p.Detail, tc.want) {
					t.Errorf("problem %s, want %q in its detail", b, tc.want)
				}
				return
			}
			if string(b) != tc.want {
				t.Errorf("file %q, want %q", b, tc.want)
			}
			if ct := resp.Header.Get("Content-Type"); ct != api.RDPContentType {
				t.Errorf("Content-Type %q", ct)
			}
			if cd := resp.Header.Get("Content-Disposition"); !strings.HasPrefix(cd, "attachment; filename=") || !strings.HasSuffix(cd, `.rdp"`) {
				t.Errorf("Content-Disposition %q", cd)
			}
			if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control %q", cc)
			}
		})
	}
	// The file never holds the password, and reading it does not spend it.
	resp, b := e.call("GET", "/v1/vms/"+withCred.ID+"/desktop.rdp", "ann-token", "")
	if resp.StatusCode != 200 || strings.Contains(string(b), cred.Password) {
		t.Errorf("%d %q", resp.StatusCode, b)
	}
	resp, b = e.call("POST", "/v1/vms/"+withCred.ID+"/credentials", "ann-token", "")
	var cr api.CredentialsResponse
	if resp.StatusCode != 200 || json.Unmarshal(b, &cr) != nil || cr.Password != cred.Password || cr.User != "ann_x" {
		t.Errorf("the password after the .rdp files: %d %s", resp.StatusCode, b)
	}
}
