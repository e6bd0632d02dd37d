package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fake writes a shell script that stands in for gpuvmd.
func fake(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gpuvmd")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

const readyBody = `# A child in the process group, as the backend plugins are, stopped with
# the parent as gpuvmd stops its plugins.
sleep 300 &
child=$!
trap 'echo "got TERM" >&2; kill $child; exit 0' TERM
echo 'level=INFO msg="gpuvmd ready" listen=127.0.0.1:4242 backends=[]' >&2
echo "args: $*" >&2
echo "env: $GPUVM_CONFIG|$E2E_X" >&2
while :; do sleep 0.05; done`

func TestStartWaitStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Setenv("GPUVM_CONFIG", "/etc/not-this")
	p, err := Start(ctx, Config{Binary: fake(t, readyBody), Args: []string{"--plugin-dir", "/x"}, Env: []string{"E2E_X=1"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Addr() != "127.0.0.1:4242" || p.URL() != "http://127.0.0.1:4242" {
		t.Errorf("addr %q url %q", p.Addr(), p.URL())
	}
	m, err := p.WaitLog(ctx, regexp.MustCompile(`^args: (.*)$`))
	if err != nil {
		t.Fatal(err)
	}
	if m[1] != "--plugin-dir /x --listen 127.0.0.1:0" {
		t.Errorf("args %q: want the caller's --plugin-dir kept and --listen added", m[1])
	}
	if _, err := p.WaitLog(ctx, regexp.MustCompile(`^env: \|1$`)); err != nil {
		t.Errorf("GPUVM_CONFIG emptied and Env added: %v\n%s", err, p.Logs())
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Errorf("stop: %v", err)
	}
	if !strings.Contains(p.Logs(), "got TERM") {
		t.Errorf("Stop sent no SIGTERM:\n%s", p.Logs())
	}
	select {
	case <-p.Done():
	default:
		t.Error("Done not closed after Stop")
	}
}

func TestKillEndsTheProcessGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Start(ctx, Config{Binary: fake(t, readyBody), Args: []string{"--listen", "x", "--plugin-dir", "/x"}})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p.Logs(), "got TERM") {
		t.Error("Kill let the process trap the signal")
	}
	// The group's other member (sleep 300) is gone too.
	deadline := time.Now().Add(10 * time.Second)
	for groupAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has members after Kill", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStartReportsExitAndTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Start(ctx, Config{Binary: fake(t, `echo "gpuvmd: configuration has errors" >&2; exit 1`), Args: []string{"--plugin-dir", "/x"}})
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "configuration has errors") {
		t.Errorf("a gpuvmd that exits: %v", err)
	}
	_, err = Start(ctx, Config{Binary: fake(t, `echo starting >&2; sleep 300`), Args: []string{"--plugin-dir", "/x"},
		ReadyTimeout: 300 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "starting") {
		t.Errorf("a gpuvmd that is never ready: %v", err)
	}
}

// groupAlive reports whether any process of the group pgid is left (a
// zombie counts as gone).
func groupAlive(pgid int) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}

// A gpuvmd that leaves a process behind holding its stderr is reported, and
// the process is killed.
func TestStopReportsLeftovers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := strings.Replace(readyBody, "kill $child; ", "", 1)
	p, err := Start(ctx, Config{Binary: fake(t, body), Args: []string{"--plugin-dir", "/x"}})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	if err := p.Stop(10 * time.Second); err == nil || !strings.Contains(err.Error(), "still held its stderr") {
		t.Errorf("stop: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for groupAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has members after Stop", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
