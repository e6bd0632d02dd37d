package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
)

func (e *consoleEnv) tunnel(token, vm, body string) (int, api.TunnelResponse, api.Problem) {
	e.t.Helper()
	resp, b := e.call("POST", "/v1/vms/"+vm+"/tunnel", token, body)
	var out api.TunnelResponse
	var p api.Problem
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, &out); err != nil {
			e.t.Fatal(err)
		}
	} else {
		_ = json.Unmarshal(b, &p)
	}
	return resp.StatusCode, out, p
}

// TestTunnelEcho: a tunnel ticket opens one websocket to the guest's port
// (an echo server stands in), and bytes go both ways, many times over a
// message's size.
func TestTunnelEcho(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{CheckInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e.http.Client().CloseIdleConnections()
	leaks := goleak.IgnoreCurrent()

	code, tun, p := e.tunnel("ann-token", "box", `{"port":7}`)
	if code != 200 || tun.Port != 7 || tun.VMID != e.box.ID || !strings.Contains(tun.WebSocketURL, "/v1/tunnel/ws?") {
		t.Fatalf("%d %+v %+v", code, tun, p)
	}
	ws, status, detail := e.dialWS(ctx, tun.WebSocketURL)
	if ws == nil {
		t.Fatalf("websocket refused: %d %s", status, detail)
	}
	nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	data := make([]byte, 300<<10)
	rand.Read(data)
	go func() { nc.Write(data) }()
	got := make([]byte, len(data))
	if _, err := io.ReadFull(nc, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Error("the echo differs from what was sent")
	}
	nc.Close()
	if ws2, status, detail := e.dialWS(ctx, tun.WebSocketURL); ws2 != nil || status != 403 || !strings.Contains(detail, "already used") {
		t.Errorf("second use: %d %q", status, detail)
	}
	// A console ticket does not open a tunnel, nor a tunnel ticket the console.
	c := e.console("ann-token", e.box)
	wsBase := "ws" + strings.TrimPrefix(e.http.URL, "http")
	if ws2, status, detail := e.dialWS(ctx, wsBase+"/v1/tunnel/ws?ticket="+c.Ticket); ws2 != nil || status != 403 || !strings.Contains(detail, "console ticket") {
		t.Errorf("console ticket on the tunnel: %d %q", status, detail)
	}
	// The guest's port is closed: the websocket is refused, saying that
	// the guest refused; the request log has it as no failure of gpuvmd's.
	_, tun22, _ := e.tunnel("ann-token", e.box.ID, `{"port":22}`)
	ws2, status, p22 := e.dialWSWith(ctx, tun22.WebSocketURL, nil)
	if want := "the guest refused the connection on port 22 of VM box (192.0.2.10): nothing listens there"; ws2 != nil || status != 502 || p22.Detail != want || p22.Type != api.ProblemBase+"guest-refused" {
		t.Errorf("closed port: %d %+v; want 502 guest-refused %q", status, p22, want)
	}
	var logged []any
	for _, l := range e.logEntries("request") {
		if l["path"] == "/v1/tunnel/ws" {
			logged = append(logged, l["level"], l["status"])
		}
	}
	if fmt.Sprint(logged) != "[INFO 502]" {
		t.Errorf("the tunnel's requests are logged at [level status]: %v; want [INFO 502] (the guest refused, gpuvmd did not fail)", logged)
	}
	e.http.Client().CloseIdleConnections()
	goleak.VerifyNone(t, leaks)
}

// TestTunnelVMStops: an open tunnel ends when its VM stops.
func TestTunnelVMStops(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{CheckInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, tun, _ := e.tunnel("ann-token", "box", `{"port":7}`)
	ws, status, detail := e.dialWS(ctx, tun.WebSocketURL)
	if ws == nil {
		t.Fatalf("websocket refused: %d %s", status, detail)
	}
	e.setState(e.box, "deleting")
	if code, reason := readClose(ctx, ws); code != websocket.StatusGoingAway || reason != "VM box is deleting" {
		t.Errorf("closed with %d %q", code, reason)
	}
}

func TestTunnelRequests(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{})
	for _, tc := range []struct {
		name, body  string
		status      int
		field, text string
	}{
		{"no port", `{}`, 422, "port", "not a TCP port"},
		{"port too large", `{"port":70000}`, 422, "port", "not a TCP port"},
		{"port as text", `{"port":"22"}`, 400, "port", "JSON int"},
		{"unknown field", `{"port":22,"host":"10.0.0.1"}`, 400, "host", "unknown field"},
		{"no body", ``, 400, "", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, p := e.tunnel("ann-token", "box", tc.body)
			if code != tc.status || p.Field != tc.field || !strings.Contains(p.Detail, tc.text) {
				t.Errorf("%d %+v", code, p)
			}
		})
	}
	// Where the tunnel goes: leases before the agent, IPv4 before IPv6;
	// addresses a guest may not claim are skipped.
	own := netip.Addr{}
	for a := range hostAddresses() {
		if !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			own = a
			break
		}
	}
	v6 := netip.MustParseAddr("2001:db8::5")
	agent4 := netip.MustParseAddr("198.51.100.7")
	addr := func(ip netip.Addr, src hypervisor.AddressSource) hypervisor.Address {
		return hypervisor.Address{IP: ip, Source: src}
	}
	cases := []struct {
		name  string
		addrs []hypervisor.Address
		want  netip.Addr // invalid: none usable
	}{
		{"lease IPv4", []hypervisor.Address{addr(v6, hypervisor.SourceLease), addr(guestIP, hypervisor.SourceLease)}, guestIP},
		{"lease before agent", []hypervisor.Address{addr(agent4, hypervisor.SourceAgent), addr(v6, hypervisor.SourceLease)}, v6},
		{"agent", []hypervisor.Address{addr(agent4, hypervisor.SourceAgent)}, agent4},
		{"loopback and link-local", []hypervisor.Address{addr(netip.MustParseAddr("127.0.0.1"), hypervisor.SourceAgent), addr(netip.MustParseAddr("fe80::1"), hypervisor.SourceLease)}, netip.Addr{}},
		{"none", nil, netip.Addr{}},
	}
	if own.IsValid() {
		cases = append(cases, struct {
			name  string
			addrs []hypervisor.Address
			want  netip.Addr
		}{"the host's own address from the agent", []hypervisor.Address{addr(own, hypervisor.SourceAgent)}, netip.Addr{}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.consoles.mu.Lock()
			e.consoles.addrs = tc.addrs
			e.consoles.mu.Unlock()
			got, err := e.srv.guestAddress(context.Background(), e.box)
			if tc.want.IsValid() && (err != nil || got != tc.want) || !tc.want.IsValid() && err == nil {
				t.Errorf("guestAddress = %v, %v; want %v", got, err, tc.want)
			}
			if !tc.want.IsValid() {
				code, _, p := e.tunnel("ann-token", "box", `{"port":22}`)
				if code != 409 || !strings.Contains(p.Detail, "no IP address") {
					t.Errorf("tunnel without an address: %d %+v", code, p)
				}
			}
		})
	}
}
