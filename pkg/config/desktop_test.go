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
		{"vnc", "", `protocol = "vnc"`, Desktop{Protocol: DesktopVNC}},
		{"rdp", "", `protocol = "rdp"`, Desktop{Protocol: DesktopRDP, Port: 3389}},
		{"rdp without display", `display { type = "none" }`, `protocol = "rdp"
    port = 13389`, Desktop{Protocol: DesktopRDP, Port: 13389}},
		{"dcv", "", `protocol = "dcv"`, Desktop{Protocol: DesktopDCV, Port: 8443, Session: "console"}},
		{"dcv session", "", `protocol = "dcv"
    session = "work-1"`, Desktop{Protocol: DesktopDCV, Port: 8443, Session: "work-1"}},
		{"sunshine", "", `protocol = "sunshine"`, Desktop{Protocol: DesktopSunshine, Port: 47989, WebPort: 47990, Credentials: CredentialsAsk}},
		{"sunshine base", "", `protocol = "sunshine"
    port = 37989
    credentials = "vm"`, Desktop{Protocol: DesktopSunshine, Port: 37989, WebPort: 37990, Credentials: CredentialsVM}},
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
