package config

import (
	"strings"
	"testing"
	"time"
)

func TestNodeBlock(t *testing.T) {
	def := Node{HeartbeatInterval: 15 * time.Second, HeartbeatTimeout: 45 * time.Second}
	for _, tc := range []struct {
		name, hcl string
		want      Node
		err       string // a diagnostic's summary; "" for none
	}{
		{"no server block", ``, def, ""},
		{"no node block", `server {}`, def, ""},
		{"name only", "server {\n node {\n name = \"gpu-03\"\n }\n}", Node{Name: "gpu-03", HeartbeatInterval: 15 * time.Second, HeartbeatTimeout: 45 * time.Second}, ""},
		{"fast heartbeat, default timeout", "server {\n node {\n heartbeat_interval = \"1s\"\n }\n}", Node{HeartbeatInterval: time.Second, HeartbeatTimeout: 3 * time.Second}, ""},
		{"all set", "server {\n node {\n name = \"gpu.lab-2_a\"\n heartbeat_interval = \"10s\"\n heartbeat_timeout = \"1m\"\n }\n}",
			Node{Name: "gpu.lab-2_a", HeartbeatInterval: 10 * time.Second, HeartbeatTimeout: time.Minute}, ""},
		{"name with a space", "server {\n node {\n name = \"gpu 3\"\n }\n}", Node{}, "Invalid node name"},
		{"name of a leader payload", "server {\n node {\n name = \"*\"\n }\n}", Node{}, "Invalid node name"},
		{"empty name", "server {\n node {\n name = \"\"\n }\n}", Node{}, "Invalid node name"},
		{"interval zero", "server {\n node {\n heartbeat_interval = \"0\"\n }\n}", Node{}, "Invalid heartbeat_interval"},
		{"interval too long", "server {\n node {\n heartbeat_interval = \"10m\"\n }\n}", Node{}, "Invalid heartbeat_interval"},
		{"timeout under two intervals", "server {\n node {\n heartbeat_interval = \"10s\"\n heartbeat_timeout = \"15s\"\n }\n}", Node{}, "Invalid heartbeat_timeout"},
		{"bad duration", "server {\n node {\n heartbeat_timeout = \"soon\"\n }\n}", Node{}, "Invalid duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkBlock(t, tc.hcl, tc.err, 0, tc.want, func(c *Config) Node { return c.Server.Node })
		})
	}
}

func TestHTTPBlock(t *testing.T) {
	def := HTTP{ReadHeaderTimeout: 10 * time.Second, BodyTimeout: 30 * time.Second, WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute, MaxConnsPerIP: 128,
		UDPMaxDatagram: 8192, UDPDatagramsPerSecond: 50000, UDPBytesPerSecond: 64 << 20, UDPIdleTimeout: 2 * time.Minute}
	udp := func(h HTTP) HTTP {
		h.UDPMaxDatagram, h.UDPDatagramsPerSecond, h.UDPBytesPerSecond, h.UDPIdleTimeout = def.UDPMaxDatagram, def.UDPDatagramsPerSecond, def.UDPBytesPerSecond, def.UDPIdleTimeout
		return h
	}
	for _, tc := range []struct {
		name, hcl string
		want      HTTP
		err       string // a diagnostic's summary; "" for none
	}{
		{"no server block", ``, def, ""},
		{"no http block", `server {}`, def, ""},
		{"all set", "server {\n http {\n read_header_timeout = \"5s\"\n body_timeout = \"1m\"\n write_timeout = \"5m\"\n idle_timeout = \"1h\"\n max_conns_per_ip = 4\n }\n}",
			udp(HTTP{ReadHeaderTimeout: 5 * time.Second, BodyTimeout: time.Minute, WriteTimeout: 5 * time.Minute, IdleTimeout: time.Hour, MaxConnsPerIP: 4}), ""},
		{"udp caps", "server {\n http {\n udp_max_datagram = \"1500B\"\n udp_datagrams_per_second = 2000\n udp_bytes_per_second = \"2MiB\"\n udp_idle_timeout = \"30s\"\n }\n}",
			HTTP{ReadHeaderTimeout: 10 * time.Second, BodyTimeout: 30 * time.Second, WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute, MaxConnsPerIP: 128,
				UDPMaxDatagram: 1500, UDPDatagramsPerSecond: 2000, UDPBytesPerSecond: 2 << 20, UDPIdleTimeout: 30 * time.Second}, ""},
		{"datagram too small", "server {\n http {\n udp_max_datagram = \"100B\"\n }\n}", HTTP{}, "Invalid udp_max_datagram"},
		{"datagram past UDP", "server {\n http {\n udp_max_datagram = \"64KiB\"\n }\n}", HTTP{}, "Invalid udp_max_datagram"},
		{"datagram without a unit", "server {\n http {\n udp_max_datagram = \"1500\"\n }\n}", HTTP{}, "Invalid size"},
		{"no datagram a second", "server {\n http {\n udp_datagrams_per_second = 0\n }\n}", HTTP{}, "Invalid udp_datagrams_per_second"},
		{"bytes a second too few", "server {\n http {\n udp_bytes_per_second = \"1KiB\"\n }\n}", HTTP{}, "Invalid udp_bytes_per_second"},
		{"udp idle zero", "server {\n http {\n udp_idle_timeout = \"0\"\n }\n}", HTTP{}, "Invalid udp_idle_timeout"},
		{"timeout zero", "server {\n http {\n body_timeout = \"0\"\n }\n}", HTTP{}, "Invalid body_timeout"},
		{"timeout past an hour", "server {\n http {\n write_timeout = \"2h\"\n }\n}", HTTP{}, "Invalid write_timeout"},
		{"timeout not a duration", "server {\n http {\n idle_timeout = \"forever\"\n }\n}", HTTP{}, "Invalid duration"},
		{"timeout overflowing", "server {\n http {\n read_header_timeout = \"9999999999999h\"\n }\n}", HTTP{}, "Invalid duration"},
		{"no connection", "server {\n http {\n max_conns_per_ip = 0\n }\n}", HTTP{}, "Invalid max_conns_per_ip"},
		{"negative connections", "server {\n http {\n max_conns_per_ip = -5\n }\n}", HTTP{}, "Invalid max_conns_per_ip"},
		{"too many connections", "server {\n http {\n max_conns_per_ip = 9223372036854775807\n }\n}", HTTP{}, "Invalid max_conns_per_ip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkBlock(t, tc.hcl, tc.err, 0, tc.want, func(c *Config) HTTP { return c.Server.HTTP })
		})
	}
}

// server.contact names whom to ask: a name and email or a URL, one line.
func TestServerContact(t *testing.T) {
	for _, tc := range []struct {
		name, hcl string
		want      string
		err       string // a diagnostic's summary; "" for none
	}{
		{"none", `server {}`, "", ""},
		{"name and email", `server { contact = "Lab IT <gpu-help@example.org>" }`, "Lab IT <gpu-help@example.org>", ""},
		{"trimmed", `server { contact = "  Ann Lee  " }`, "Ann Lee", ""},
		{"a web page", `server { contact = "https://help.example.org/gpu" }`, "https://help.example.org/gpu", ""},
		{"mailto", `server { contact = "mailto:gpu-help@example.org" }`, "mailto:gpu-help@example.org", ""},
		{"empty", `server { contact = "" }`, "", "Invalid contact"},
		{"blank", `server { contact = "   " }`, "", "Invalid contact"},
		{"two lines", "server {\n contact = \"Ann\\nLee\"\n}", "", "Invalid contact"},
		{"too long", `server { contact = "` + strings.Repeat("a", 201) + `" }`, "", "Invalid contact"},
		{"a URL of another scheme", `server { contact = "javascript://x" }`, "", "Invalid contact"},
		{"a URL without a host", `server { contact = "https:///help" }`, "", "Invalid contact"},
		{"not a string", `server { contact = 3 }`, "3", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := 1 // the attribute's line
			if strings.Contains(tc.hcl, "\n") {
				line = 2
			}
			checkBlock(t, tc.hcl, tc.err, line, tc.want, func(c *Config) string { return c.Server.Contact })
		})
	}
}
