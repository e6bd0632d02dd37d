// Package daemon runs the real gpuvmd binary as a process for tests that
// need the whole daemon (test/e2e, test/bench): it builds gpuvmd and the
// backend plugins once per test binary, starts gpuvmd, waits for its
// "gpuvmd ready" line, watches its log, and stops it (SIGTERM) or kills it
// (SIGKILL).
package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuvm/gpuvm/test/testbin"
)

// Binaries built on first use only (a test binary that starts no gpuvmd
// builds nothing) and removed by Cleanup.
var (
	gpuvmdOnce  sync.Once
	gpuvmdDir   string
	gpuvmdErr   error
	pluginsOnce sync.Once
	pluginsDir  string
	pluginsErr  error
	cleanupMu   sync.Mutex
	cleanups    []func()
)

// Gpuvmd returns the path of a gpuvmd binary built from this tree: the
// prebuilt one (testbin.Prebuilt), or one built on the first call.
func Gpuvmd() (string, error) {
	gpuvmdOnce.Do(func() {
		if p := testbin.Prebuilt("gpuvmd"); p != "" {
			gpuvmdDir = filepath.Dir(p)
			return
		}
		dir, err := os.MkdirTemp("", "gpuvm-gpuvmd-")
		if err != nil {
			gpuvmdErr = err
			return
		}
		addCleanup(func() { os.RemoveAll(dir) })
		if err := testbin.Build(dir, "gpuvmd", "./cmd/gpuvmd"); err != nil {
			gpuvmdErr = err
			return
		}
		gpuvmdDir = dir
	})
	if gpuvmdErr != nil {
		return "", gpuvmdErr
	}
	return filepath.Join(gpuvmdDir, "gpuvmd"), nil
}

// Plugins returns a directory holding the backend binaries:
// $GPUVM_PLUGIN_DIR, or one they are built into on the first call.
func Plugins() (string, error) {
	pluginsOnce.Do(func() {
		var cleanup func()
		pluginsDir, cleanup, pluginsErr = testbin.Plugins()
		if cleanup != nil {
			addCleanup(cleanup)
		}
	})
	return pluginsDir, pluginsErr
}

func addCleanup(f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanups = append(cleanups, f)
}

// Cleanup removes the binaries Gpuvmd and Plugins built; call it from
// TestMain once the tests have run.
func Cleanup() {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	for _, f := range cleanups {
		f()
	}
	cleanups = nil
}

// Config is one gpuvmd process.
type Config struct {
	// Binary is gpuvmd's path (default: Gpuvmd()).
	Binary string
	// Args are gpuvmd's flags. --listen 127.0.0.1:0 is added unless Args
	// has --listen, and --plugin-dir Plugins() unless it has --plugin-dir.
	Args []string
	// Env is added to the test's environment, in which GPUVM_CONFIG is
	// emptied (a test names its configuration with --config).
	Env []string
	// ReadyTimeout bounds the wait for "gpuvmd ready" (default 90s).
	ReadyTimeout time.Duration
}

// Process is a running gpuvmd.
type Process struct {
	cmd  *exec.Cmd
	addr string

	mu      sync.Mutex
	logs    strings.Builder
	lines   []string
	partial []byte        // the end of the log after its last newline
	grew    chan struct{} // closed and replaced when a line arrives
	done    chan struct{} // closed when the process has exited and its log is read
	err     error         // Wait's error, once done
}

var readyLine = regexp.MustCompile(`msg="gpuvmd ready".* listen=(\S+)`)

// Start starts gpuvmd and waits until it serves (its "gpuvmd ready" line).
// A gpuvmd that exits or is not ready in time is an error that holds its
// log. ctx bounds the wait, not the process: Stop or Kill ends it.
func Start(ctx context.Context, cfg Config) (*Process, error) {
	if cfg.Binary == "" {
		bin, err := Gpuvmd()
		if err != nil {
			return nil, err
		}
		cfg.Binary = bin
	}
	args := append([]string(nil), cfg.Args...)
	if !hasFlag(args, "listen") {
		args = append(args, "--listen", "127.0.0.1:0")
	}
	if !hasFlag(args, "plugin-dir") {
		dir, err := Plugins()
		if err != nil {
			return nil, err
		}
		args = append(args, "--plugin-dir", dir)
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 90 * time.Second
	}
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Env = append(append(os.Environ(), "GPUVM_CONFIG="), cfg.Env...)
	// Its own process group: a kill of the group ends the plugins too when
	// gpuvmd cannot (SIGKILL).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &Process{cmd: cmd, grew: make(chan struct{}), done: make(chan struct{})}
	cmd.Stderr = (*lineWriter)(p)
	// A child left behind that holds stderr open must not keep Wait waiting.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Binary, err)
	}
	go p.wait()
	rctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	m, err := p.WaitLog(rctx, readyLine)
	if err != nil {
		_ = p.Kill()
		return nil, fmt.Errorf("gpuvmd %s: not ready: %w\n%s", strings.Join(args, " "), err, p.Logs())
	}
	p.addr = m[1]
	return p, nil
}

func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// lineWriter collects gpuvmd's stderr by lines.
type lineWriter Process

func (l *lineWriter) Write(b []byte) (int, error) {
	p := (*Process)(l)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		p.addLine(string(p.partial[:i]))
		p.partial = p.partial[i+1:]
	}
	return len(b), nil
}

// addLine records a line; p.mu is held.
func (p *Process) addLine(line string) {
	p.logs.WriteString(line + "\n")
	p.lines = append(p.lines, line)
	close(p.grew)
	p.grew = make(chan struct{})
}

func (p *Process) wait() {
	err := p.cmd.Wait()
	p.mu.Lock()
	if len(p.partial) > 0 {
		p.addLine(string(p.partial))
		p.partial = nil
	}
	p.err = err
	p.mu.Unlock()
	close(p.done)
}

// Addr is the address gpuvmd serves HTTP on ("127.0.0.1:40123").
func (p *Process) Addr() string { return p.addr }

// URL is gpuvmd's base URL.
func (p *Process) URL() string { return "http://" + p.addr }

// Pid is gpuvmd's process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Logs is everything gpuvmd wrote to stderr so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Done is closed once gpuvmd has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// ErrExited is WaitLog's error when gpuvmd exits before the line came.
var ErrExited = errors.New("gpuvmd exited")

// WaitLog waits for a log line that re matches, from the start of the log,
// and returns the match (re.FindStringSubmatch).
func (p *Process) WaitLog(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	seen := 0
	for {
		p.mu.Lock()
		lines, grew := p.lines[seen:], p.grew
		seen = len(p.lines)
		p.mu.Unlock()
		for _, l := range lines {
			if m := re.FindStringSubmatch(l); m != nil {
				return m, nil
			}
		}
		select {
		case <-grew:
		case <-p.done:
			// Read what came with the end, then give up.
			p.mu.Lock()
			rest := p.lines[seen:]
			err := p.err
			p.mu.Unlock()
			for _, l := range rest {
				if m := re.FindStringSubmatch(l); m != nil {
					return m, nil
				}
			}
			return nil, fmt.Errorf("waiting for /%s/: %w (%v)", re, ErrExited, err)
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for /%s/: %w", re, ctx.Err())
		}
	}
}

// Stop asks gpuvmd to shut down (SIGTERM) and waits for it; after
// timeout it is killed. Whatever it left in its process group is killed
// then. It returns how gpuvmd exited.
func (p *Process) Stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.Kill()
		return fmt.Errorf("gpuvmd did not stop within %v of SIGTERM; killed", timeout)
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.mu.Lock()
	defer p.mu.Unlock()
	if errors.Is(p.err, exec.ErrWaitDelay) {
		return errors.New("gpuvmd exited, but a process it started still held its stderr (killed now)")
	}
	return p.err
}

// Kill kills gpuvmd and its backend plugins (SIGKILL to the process group,
// as a power cut or the OOM killer would leave things) and waits until they
// are gone.
func (p *Process) Kill() error {
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill gpuvmd's process group %d: %w", p.cmd.Process.Pid, err)
	}
	<-p.done
	return nil
}
