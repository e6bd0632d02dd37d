package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/gpuvm/gpuvm/pkg/api"
)

func TestWebSocketURL(t *testing.T) {
	for _, tc := range []struct{ base, want string }{
		{"http://gpu.example:8080", "ws://gpu.example:8080/v1/tunnel/ws?ticket=gvt_T&vm=V"},
		{"https://gpu.example", "wss://gpu.example/v1/tunnel/ws?ticket=gvt_T&vm=V"},
		{"https://proxy.example/gpuvm/", "wss://proxy.example/gpuvm/v1/tunnel/ws?ticket=gvt_T&vm=V"},
	} {
		c, err := New(tc.base, "tok")
		if err != nil {
			t.Fatal(err)
		}
		if got := c.WebSocketURL(tunnelWSPath, "V", "gvt_T"); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.base, got, tc.want)
		}
	}
}

// A refused websocket is the server's problem, and its message does not
// repeat the ticket; an accepted one is a stream that outlives the dial's
// context.
func TestDialTicket(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/vms/box/tunnel" && r.Header.Get("Authorization") == "Bearer tok":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"vm_id":"V","port":22,"ticket":"gvt_good","expires_at":"2030-01-01T00:00:00Z","websocket_url":"ws://elsewhere/x"}`)
		case r.URL.Path == "/v1/vms/gone/tunnel":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"vm_id":"G","port":22,"ticket":"gvt_spent","expires_at":"2030-01-01T00:00:00Z","websocket_url":"ws://elsewhere/x"}`)
		case r.URL.Path == tunnelWSPath && r.URL.Query().Get("ticket") == "gvt_good":
			ws, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			typ, b, err := ws.Read(r.Context())
			if err == nil {
				ws.Write(r.Context(), typ, b)
			}
			ws.Close(websocket.StatusNormalClosure, "")
		case r.URL.Path == tunnelWSPath:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"type":"`+api.ProblemBase+`forbidden","title":"Not allowed","status":403,"detail":"the ticket was already used"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.DialTunnel(context.Background(), "gone", 22)
	p, ok := AsProblem(err)
	if !ok || !IsForbidden(err) || p.Detail != "the ticket was already used" || strings.Contains(err.Error(), "gvt_spent") {
		t.Errorf("refused websocket: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	conn, err := c.DialTunnel(ctx, "box", 22)
	cancel() // the stream outlives the dial's context
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(conn, b); err != nil || string(b) != "ping" {
		t.Errorf("echo %q %v", b, err)
	}
	if _, err := io.ReadFull(conn, b); !errors.Is(err, io.EOF) {
		t.Errorf("after the server closed: %v", err)
	}
}
