package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// serveDebug serves Go's profiles (net/http/pprof) on addr until ctx ends:
// `go tool pprof http://ADDR/debug/pprof/profile?seconds=30` profiles a
// running gpuvmd. It has no sign-in, so it listens on loopback only.
func serveDebug(ctx context.Context, addr string, log *slog.Logger) error {
	if err := loopbackOnly(addr); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on --debug-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Warn("serving Go profiles without sign-in on loopback", "debug_listen", ln.Addr().String())
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("debug listener stopped", "err", err)
		}
	}()
	return nil
}

// loopbackOnly refuses an address whose host is not a loopback IP or
// "localhost".
func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--debug-listen %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--debug-listen %q: Go's profiles have no sign-in, so the address must be on loopback (127.0.0.1, [::1] or localhost)", addr)
}
