package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:6060", true},
		{"[::1]:6060", true},
		{"localhost:0", true},
		{"0.0.0.0:6060", false},
		{":6060", false},
		{"10.0.0.1:6060", false},
		{"example.org:6060", false},
		{"127.0.0.1", false},
	} {
		err := loopbackOnly(tc.addr)
		if (err == nil) != tc.ok {
			t.Errorf("loopbackOnly(%q) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--debug-listen") {
			t.Errorf("loopbackOnly(%q): %v does not name the flag", tc.addr, err)
		}
	}
}

func TestServeDebugServesProfiles(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := serveDebug(ctx, addr, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("goroutine profile: %d %.200s", resp.StatusCode, body)
	}
}
