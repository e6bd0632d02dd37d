package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// portalCookie opens a portal session with token: its cookie header.
func (e *consoleEnv) portalCookie(token string) string {
	e.t.Helper()
	resp, b := e.call("POST", "/v1/session", "", `{"token":"`+token+`"}`)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("portal sign-in with %s: %d %s", token, resp.StatusCode, b)
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == api.SessionCookie {
			return ck.Name + "=" + ck.Value
		}
	}
	e.t.Fatalf("portal sign-in with %s: no cookie", token)
	return ""
}

// dialWSWith is dialWS with request headers; a refusal is the status and
// the problem.
func (e *consoleEnv) dialWSWith(ctx context.Context, rawURL string, hdr http.Header) (*websocket.Conn, int, api.Problem) {
	e.t.Helper()
	ws, resp, err := websocket.Dial(ctx, rawURL, &websocket.DialOptions{HTTPClient: e.http.Client(), HTTPHeader: hdr})
	var p api.Problem
	if err != nil {
		if resp == nil {
			e.t.Fatalf("dial %s: %v", rawURL, err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &p)
		return nil, resp.StatusCode, p
	}
	return ws, http.StatusSwitchingProtocols, p
}

// A ticket's websocket that carries credentials opens only with its
// owner's: another user's bearer token or portal cookie is 403 naming the
// credential, and the ticket is not spent (it then opens without them);
// credentials that are no one's are 401, the ticket unspent too. Without
// credentials the ticket alone opens it, as before. For every kind of
// ticket: the console, a TCP tunnel, a UDP tunnel.
func TestTicketOpensOnlyForItsOwnersCredentials(t *testing.T) {
	e := newConsoleEnv(t, ConsoleOptions{CheckInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	annCookie, bobCookie := e.portalCookie("ann-token"), e.portalCookie("bob-token")
	adminCookie := e.portalCookie("admin-token")
	kinds := []struct {
		name   string
		ticket func() string // ann's ticket for her VM: its websocket URL
	}{
		{"console", func() string { return e.console("ann-token", e.box).WebSocketURL }},
		{"tcp tunnel", func() string {
			code, tun, p := e.tunnel("ann-token", "box", `{"port":7}`)
			if code != 200 {
				t.Fatalf("tunnel ticket: %d %+v", code, p)
			}
			return tun.WebSocketURL
		}},
		{"udp tunnel", func() string {
			code, tun, p := e.tunnel("ann-token", "box", `{"port":7,"protocol":"udp"}`)
			if code != 200 {
				t.Fatalf("udp tunnel ticket: %d %+v", code, p)
			}
			return tun.WebSocketURL
		}},
	}
	creds := []struct {
		name  string
		hdr   http.Header
		code  int
		field string
	}{
		{"no credentials", nil, 101, ""},
		{"the owner's bearer token", http.Header{"Authorization": {"Bearer ann-token"}}, 101, ""},
		{"the owner's cookie", http.Header{"Cookie": {annCookie}}, 101, ""},
		{"the owner's bearer token and another's cookie", http.Header{"Authorization": {"Bearer ann-token"}, "Cookie": {bobCookie}}, 101, ""},
		{"an ended session's cookie", http.Header{"Cookie": {api.SessionCookie + "=gone"}}, 101, ""},
		{"another user's bearer token", http.Header{"Authorization": {"Bearer bob-token"}}, 403, "Authorization"},
		{"another user's cookie", http.Header{"Cookie": {bobCookie}}, 403, api.SessionCookie},
		{"an admin's bearer token", http.Header{"Authorization": {"Bearer admin-token"}}, 403, "Authorization"},
		{"an admin's cookie", http.Header{"Cookie": {adminCookie}}, 403, api.SessionCookie},
		{"another's bearer token and the owner's cookie", http.Header{"Authorization": {"Bearer bob-token"}, "Cookie": {annCookie}}, 403, "Authorization"},
		{"a bearer token of no one", http.Header{"Authorization": {"Bearer nobody-token"}}, 401, ""},
	}
	for _, k := range kinds {
		for _, cr := range creds {
			what := k.name + " with " + cr.name
			url := k.ticket()
			ws, code, p := e.dialWSWith(ctx, url, cr.hdr)
			if code != cr.code || cr.field != "" && p.Field != cr.field {
				t.Errorf("%s: %d %+v, want %d naming %q", what, code, p, cr.code, cr.field)
			}
			if ws != nil {
				ws.Close(websocket.StatusNormalClosure, "")
				continue
			}
			if code == 101 {
				continue
			}
			if strings.Contains(p.Detail, "spent") {
				t.Errorf("%s: refused as spent: %s", what, p.Detail)
			}
			// Refused: the ticket is unspent, and opens for its owner.
			ws, code, p = e.dialWSWith(ctx, url, nil)
			if ws == nil {
				t.Errorf("%s: refused, then the ticket without credentials: %d %+v, want it unspent", what, code, p)
				continue
			}
			ws.Close(websocket.StatusNormalClosure, "")
		}
	}
}
