package homes

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestEnsureAndRemove(t *testing.T) {
	root := filepath.Join(t.TempDir(), "homes")
	uid := os.Getuid()
	if uid == 0 {
		uid = 20000 // as root, a person's uid
	}
	dir, err := Ensure(context.Background(), root, "ann", uid, 0, quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(root, "ann") {
		t.Fatalf("home %s", dir)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 || !fi.IsDir() {
		t.Fatalf("home mode %v, %v; want a 0700 directory", fi.Mode(), err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != uid {
		t.Fatalf("home owned by %d:%d, want %d:%d", st.Uid, st.Gid, uid, uid)
	}
	if rfi, _ := os.Stat(root); rfi.Mode().Perm() != 0o711 {
		t.Errorf("root mode %v, want 0711", rfi.Mode().Perm())
	}
	// A second call keeps what is there.
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("day"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(context.Background(), root, "ann", uid, 0, quiet, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(b) != "day" {
		t.Fatalf("the home's file after Ensure: %q, %v", b, err)
	}
	// Removal needs the name typed again.
	if err := Remove(root, "ann", "yes", nil, nil); !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("remove without confirmation: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal("the home went without confirmation")
	}
	if err := Remove(root, "ann", "ann", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("home still there: %v", err)
	}
}

func TestEnsureRefuses(t *testing.T) {
	root := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(root, "eve")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "fay"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		root, login string
		uid         int
		want        string
	}{
		{root, "eve", 20000, "not a directory"},
		{root, "fay", 20000, "not a directory"},
		{root, "../etc", 20000, "not a user name"},
		{root, "", 20000, "not a user name"},
		{root, "-ann", 20000, "not a user name"},
		{root, "ann", 0, "not root's"},
		{"homes", "ann", 20000, "absolute"},
		{"/", "ann", 20000, "other than /"},
	} {
		if _, err := Ensure(context.Background(), tc.root, tc.login, tc.uid, 0, quiet, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Ensure(%q, %q, %d) = %v; want %q", tc.root, tc.login, tc.uid, err, tc.want)
		}
	}
}

func TestFindVirtiofsd(t *testing.T) {
	etc, share := t.TempDir(), t.TempDir()
	bin := filepath.Join(t.TempDir(), "virtiofsd")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(dir, name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := FindVirtiofsd([]string{etc, share}); !errors.Is(err, ErrNoVirtiofsd) || !strings.Contains(err.Error(), VirtiofsdPackage) {
		t.Fatalf("no descriptors: %v", err)
	}
	write(share, "40-gpu.json", `{"type": "gpu", "binary": "`+bin+`"}`)
	write(share, "50-qemu-virtiofsd.json", `{"description": "QEMU virtiofsd vhost-user-fs", "type": "fs", "binary": "/usr/lib/qemu/nowhere"}`)
	_, err := FindVirtiofsd([]string{etc, share})
	if !errors.Is(err, ErrNoVirtiofsd) || !strings.Contains(err.Error(), "/usr/lib/qemu/nowhere does not exist") {
		t.Fatalf("a missing binary: %v", err)
	}
	// The admin's descriptor of the same name hides the distribution's.
	write(etc, "50-qemu-virtiofsd.json", `{"type": "fs", "binary": "`+bin+`"}`)
	if got, err := FindVirtiofsd([]string{etc, share}); err != nil || got != bin {
		t.Fatalf("FindVirtiofsd = %q, %v; want %s", got, err, bin)
	}
	write(etc, "10-broken.json", `{`)
	if got, err := FindVirtiofsd([]string{etc, share}); err != nil || got != bin {
		t.Fatalf("with a broken descriptor first: %q, %v", got, err)
	}
}

// A VM's start that needs the home while its removal runs (between the
// check that no VM mounts it and the removal) waits, and then gets it made
// again, empty: never a half-removed home. A check that refuses leaves
// the home whole.
func TestRemoveHoldsTheHomeAgainstEnsure(t *testing.T) {
	root := filepath.Join(t.TempDir(), "homes")
	uid, dir := homeWithNotes(t, root)
	busy := errors.New("a VM may mount it")
	if err := Remove(root, "ann", "ann", func() error { return busy }, nil); err != busy {
		t.Fatalf("remove refused by its check = %v, want the check's error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatalf("a refused removal touched the home: %v", err)
	}

	checking, proceed := make(chan struct{}), make(chan struct{})
	removed := make(chan error, 1)
	go func() {
		removed <- Remove(root, "ann", "ann", func() error {
			close(checking)
			<-proceed
			return nil
		}, nil)
	}()
	<-checking // the removal has checked: a VM's start comes now
	ensured := make(chan error, 1)
	go func() {
		_, err := Ensure(context.Background(), root, "ann", uid, 0, quiet, nil)
		ensured <- err
	}()
	select {
	case err := <-ensured:
		t.Fatalf("Ensure went ahead (%v) while the home's removal held it", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(proceed)
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	if err := <-ensured; err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 0 {
		t.Fatalf("the home after its removal and a start: %v %v; want it made again, empty", ents, err)
	}
}

// What the callers run with the home held (where it lives, recorded once
// Ensure made or found it, forgotten once Remove removed it) is ordered
// with the other: a Remove waits for Ensure's made, an Ensure for
// Remove's removed. The hooks run only when their step did.
func TestHooksRunWithTheHomeHeld(t *testing.T) {
	root := filepath.Join(t.TempDir(), "homes")
	uid := os.Getuid()
	if uid == 0 {
		uid = 20000
	}
	ensure := func(hook func()) error {
		_, err := Ensure(context.Background(), root, "ann", uid, 0, quiet, hook)
		return err
	}
	remove := func(hook func()) error { return Remove(root, "ann", "ann", nil, hook) }
	for _, c := range []struct {
		name          string
		there         bool // the home is there before
		first, second func(hook func()) error
	}{
		{"a removal waits for a made home's record", false, ensure, remove},
		{"and for a found home's", true, ensure, remove},
		{"a start waits for a removed home's forgetting", true, remove, ensure},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.RemoveAll(filepath.Join(root, "ann")); err != nil {
				t.Fatal(err)
			}
			if c.there {
				if err := ensure(nil); err != nil {
					t.Fatal(err)
				}
			}
			inHook, proceed := make(chan struct{}), make(chan struct{})
			first := make(chan error, 1)
			go func() { first <- c.first(func() { close(inHook); <-proceed }) }()
			<-inHook // the first holds the home, in its hook
			second := make(chan error, 1)
			go func() { second <- c.second(nil) }()
			select {
			case err := <-second:
				t.Fatalf("the second went ahead (%v) while the first's hook held the home", err)
			case <-time.After(200 * time.Millisecond):
			}
			close(proceed)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			if err := <-second; err != nil {
				t.Fatal(err)
			}
		})
	}
	// A removal that fails, or is refused, runs no removed hook.
	if err := ensure(nil); err != nil {
		t.Fatal(err)
	}
	called := false
	busy := errors.New("a VM may mount it")
	if err := Remove(root, "ann", "ann", func() error { return busy }, func() { called = true }); err != busy || called {
		t.Fatalf("a refused removal: %v, hook called %v", err, called)
	}
	if err := Remove(root, "bob", "bob", nil, func() { called = true }); err == nil || called {
		t.Fatalf("no home to remove: %v, hook called %v", err, called)
	}
}

// homeWithNotes makes ann's home under root with a file in it, owned by
// this process's uid (20000 for root), and returns the uid and the home.
func homeWithNotes(t *testing.T, root string) (int, string) {
	t.Helper()
	uid := os.Getuid()
	if uid == 0 {
		uid = 20000
	}
	dir, err := Ensure(context.Background(), root, "ann", uid, 0, quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("day"), 0o600); err != nil {
		t.Fatal(err)
	}
	return uid, dir
}
