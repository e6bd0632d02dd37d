package config

import (
	"reflect"
	"testing"
)

// TestDesktop: what each desktop block resolves to, defaults filled in.
func TestDesktop(t *testing.T) {
	tests := []struct {
		name, display, desktop string
		want                   Desktop
	}{
		{"default", "", "", Desktop{Protocol: DesktopVNC}},
		{"default spice", `display { type = "spice" }`, "", Desktop{Protocol: DesktopSPICE}},
		{"no display", `display { type = "none" }`, "", Desktop{Protocol: DesktopNone}},
		{"vnc", "", `protocol = "vnc"`, Desktop{Protocol: DesktopVNC, Declared: true}},
		{"rdp", "", `protocol = "rdp"`, Desktop{Protocol: DesktopRDP, Port: 3389, Declared: true}},
		{"rdp without display", `display { type = "none" }`, `protocol = "rdp"
    port = 13389`, Desktop{Protocol: DesktopRDP, Port: 13389, Declared: true}},
		{"dcv", "", `protocol = "dcv"`, Desktop{Protocol: DesktopDCV, Port: 8443, Session: "console", Declared: true}},
		{"dcv session", "", `protocol = "dcv"
    session = "work-1"`, Desktop{Protocol: DesktopDCV, Port: 8443, Session: "work-1", Declared: true}},
		{"sunshine", "", `protocol = "sunshine"`, Desktop{Protocol: DesktopSunshine, Port: 47989, WebPort: 47990, Credentials: CredentialsAsk, Declared: true}},
		{"sunshine base", "", `protocol = "sunshine"
    port = 37989
    credentials = "vm"`, Desktop{Protocol: DesktopSunshine, Port: 37989, WebPort: 37990, Credentials: CredentialsVM, Declared: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			desktop := ""
			if tc.desktop != "" {
				desktop = "desktop {\n    " + tc.desktop + "\n  }"
			}
			cfg, diags := Parse(Source{Name: "p.hcl", Data: []byte(`
profile "p" {
  boot { kernel = "/boot/vmlinuz" }
  ` + tc.display + `
  ` + desktop + `
}`)})
			if len(diags) > 0 {
				t.Fatalf("%v", diags)
			}
			if got := cfg.Profiles["p"].Desktop; got != tc.want {
				t.Errorf("%+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDesktopPorts(t *testing.T) {
	d := Desktop{Protocol: DesktopSunshine, Port: 47989, WebPort: 47990}
	want := []DesktopPort{
		{47984, "tcp", "https"}, {47989, "tcp", "http"}, {47990, "tcp", "web"}, {48010, "tcp", "rtsp"},
		{47998, "udp", "video"}, {47999, "udp", "control"}, {48000, "udp", "audio"},
	}
	if got := d.Ports(); !reflect.DeepEqual(got, want) {
		t.Errorf("sunshine ports %v", got)
	}
	if got := (Desktop{Protocol: DesktopRDP, Port: 3389}).Ports(); !reflect.DeepEqual(got, []DesktopPort{{3389, "tcp", "rdp"}}) {
		t.Errorf("rdp ports %v", got)
	}
	if got := (Desktop{Protocol: DesktopVNC}).Ports(); got != nil {
		t.Errorf("vnc ports %v", got)
	}
}

// TestProfileAccess: what a profile's VMs offer (the API's access): a
// desktop only when the profile has one, the console when it has a
// display, the network, and a password only when the guest uses one.
func TestProfileAccess(t *testing.T) {
	cfg, diags := Parse(Source{Name: "p.hcl", Data: []byte(`
template "pw" {
  content = "#cloud-config\npassword: ${password_hash}\n"
}
template "keys" {
  content = "#cloud-config\nuser: ${user}\n"
}
profile "tiny" {
  boot { kernel = "/k" }
  cloud_init { template = "keys" }
}
profile "desk" {
  boot { kernel = "/k" }
  cloud_init { template = "pw" }
  desktop { protocol = "rdp" }
}
profile "vnc-desk" {
  boot { kernel = "/k" }
  desktop { protocol = "vnc" }
}
profile "seat" {
  boot { kernel = "/k" }
  display {
    type         = "spice"
    vgpu_display = true
  }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
}
profile "dark" {
  boot { kernel = "/k" }
  display { type = "none" }
  network { type = "none" }
}
profile "stream" {
  boot { kernel = "/k" }
  desktop {
    protocol    = "sunshine"
    credentials = "vm"
  }
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, tc := range []struct {
		name, desktop, console string
		network, password      bool
	}{
		{"tiny", "", "vnc", true, false},
		{"desk", "rdp", "vnc", true, true},
		{"vnc-desk", "vnc", "vnc", true, false},
		{"seat", "spice", "spice", true, false},
		{"dark", "", "", false, false},
		{"stream", "sunshine", "vnc", true, true},
	} {
		p := cfg.Profiles[tc.name]
		if d, c, n, pw := p.DesktopOffered(), p.ConsoleOffered(), p.NetworkOffered(), p.UsesPassword(); d != tc.desktop || c != tc.console || n != tc.network || pw != tc.password {
			t.Errorf("%s offers desktop %q, console %q, network %v, password %v; want %q, %q, %v, %v", tc.name, d, c, n, pw, tc.desktop, tc.console, tc.network, tc.password)
		}
	}
}
