package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/quota"
)

// buildTree builds testdata/NAME.txtar into a new directory and returns it.
// "-- NAME --" is a file holding the lines that follow, "-- NAME -> TARGET
// --" a symbolic link, "-- NAME/ --" an empty directory (as in
// pkg/host/testdata/sysfs).
func buildTree(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name+".txtar"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	var file string
	var content []byte
	flush := func() {
		if file != "" {
			mustWrite(t, filepath.Join(root, file), bytes.TrimSuffix(content, []byte("\n")))
		}
		file, content = "", nil
	}
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		s := strings.TrimSuffix(string(line), "\n")
		if strings.HasPrefix(s, "-- ") && strings.HasSuffix(s, " --") && len(s) > 6 {
			flush()
			hdr := s[3 : len(s)-3]
			if n, target, ok := strings.Cut(hdr, " -> "); ok {
				p := filepath.Join(root, n)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, p); err != nil {
					t.Fatal(err)
				}
			} else if strings.HasSuffix(hdr, "/") {
				if err := os.MkdirAll(filepath.Join(root, hdr), 0o755); err != nil {
					t.Fatal(err)
				}
			} else {
				file = hdr
			}
			continue
		}
		if file != "" {
			content = append(content, line...)
		}
	}
	flush()
	return root
}

func mustWrite(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// devDir is the device directory of addr in a built tree.
func devDir(t *testing.T, root, addr string) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(filepath.Join(root, "bus/pci/devices", addr))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rebind points addr's driver link at driver in a built tree.
func rebind(t *testing.T, root, addr, driver string) {
	t.Helper()
	d := devDir(t, root, addr)
	_ = os.Remove(filepath.Join(d, "driver"))
	rel, _ := filepath.Rel(d, filepath.Join(root, "bus/pci/drivers", driver))
	if err := os.Symlink(rel, filepath.Join(d, "driver")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "bus/pci/drivers", driver), 0o755); err != nil {
		t.Fatal(err)
	}
}

func loadTestConfig(t *testing.T) *config.Config {
	t.Helper()
	l := new(config.Loader)
	cfg, diags := l.LoadDir(filepath.Join("testdata", "config"))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	return cfg
}

// fakeInfo is a fs.FileInfo of a given mode.
type fakeInfo struct {
	name string
	mode fs.FileMode
}

func (f fakeInfo) Name() string       { return f.name }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fakeInfo) Sys() any           { return nil }

// fakeHost is everything of a host outside sysfs.
type fakeHost struct {
	files    map[string]string      // ReadFile
	stats    map[string]fs.FileMode // Stat
	commands map[string]string      // "virsh -c URI version" -> output
	failing  map[string]error       // command -> error
	mig      map[string]bool        // MIG mode by address
	db       func() (string, Severity, string)
	schema   SchemaVersions
	clock    *fakeClock
	driver   *Driver // nil: not read
	license  string
	token    string // the licensing token file
	dialErr  error
	// vhostUser is the directory of vhost-user descriptors.
	vhostUser string
}

// fakeClock is a database server whose clock is off by skew from now.
type fakeClock struct {
	now  time.Time
	skew time.Duration
	err  error
}

func (c *fakeClock) Describe() string { return "PostgreSQL at db.example:5432" }
func (c *fakeClock) Now(context.Context) (time.Time, error) {
	return c.now.Add(c.skew), c.err
}

func healthyFake() *fakeHost {
	return &fakeHost{
		files: map[string]string{"/proc/cmdline": "BOOT_IMAGE=/vmlinuz-6.1.0-27-amd64 root=/dev/sda1 ro quiet intel_iommu=on iommu=pt",
			libvirtdPIDFile: "812\n", "/proc/812/status": "Name:\tlibvirtd\nUid:\t0\t0\t0\t0\n",
			"/proc/812/limits": "Max locked memory         8388608              8388608              bytes\n"},
		vhostUser: "testdata/vhost-user",
		stats: map[string]fs.FileMode{
			"/dev/kvm": fs.ModeDevice | fs.ModeCharDevice | 0o660, SRIOVManage: 0o755,
			nvmlLibs[0]: 0o644, nvidiactl: fs.ModeDevice | fs.ModeCharDevice | 0o666,
			// The storage pool's directory and the way to it.
			"/var": fs.ModeDir | 0o755, "/var/lib": fs.ModeDir | 0o755, "/var/lib/libvirt": fs.ModeDir | 0o755,
			"/var/lib/libvirt/images": fs.ModeDir | 0o711, "/var/lib/libvirt/images/gpuvm": fs.ModeDir | 0o711,
		},
		commands: map[string]string{
			"/bin/sh --version":                                      "virtiofsd version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\nCopyright (c) 2003-2022\n",
			"virsh -c qemu:///system version":                        "Compiled against library: libvirt 9.0.0\nUsing library: libvirt 9.0.0\nUsing API: QEMU 9.0.0\nRunning hypervisor: QEMU 7.2.0\n",
			"virsh -c qemu:///system domcapabilities --virttype kvm": "<domainCapabilities><domain>kvm</domain></domainCapabilities>\n",
			"virsh -c qemu:///system pool-info --bytes gpuvm":        "Name:           gpuvm\nUUID:           6f0c\nState:          running\nPersistent:     yes\nAutostart:      yes\nCapacity:       1000204886016\nAllocation:     100020488601\nAvailable:      900184397415\n",
			"virsh -c qemu:///system pool-dumpxml gpuvm":             "<pool type='dir'>\n  <name>gpuvm</name>\n  <target>\n    <path>/var/lib/libvirt/images/gpuvm</path>\n  </target>\n</pool>\n",
		},
		failing: map[string]error{},
		mig:     map[string]bool{"0000:18:00.0": true},
		db:      func() (string, Severity, string) { return "SQLite /var/lib/gpuvm/gpuvm.db, schema version 31", OK, "" },
		schema:  SchemaVersions{Database: 31, DatabaseFrom: "PostgreSQL", Binary: 31, BinaryFrom: "gpuvmd 1.2.0 (/usr/bin/gpuvmd)"},
		clock:   &fakeClock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), skew: 40 * time.Millisecond},
		driver:  &Driver{Version: "550.90.05", VGPUMin: "16.0", VGPUMax: "17.3"},
		license: "dls.example:443",
		token:   "testdata/client.tok", // a made-up token
	}
}

func (h *fakeHost) env(sys host.SysFS, cfg *config.Config) Env {
	return Env{
		Sys: sys, Config: cfg, VhostUserDirs: []string{h.vhostUser},
		ProbeQuotas: func(string) (quota.Enforcement, error) {
			return quota.Enforcement{Mode: quota.Project, FSType: "xfs", Device: "/dev/block/259:3"}, nil
		},
		ReadFile: func(name string) ([]byte, error) {
			if s, ok := h.files[name]; ok {
				return []byte(s), nil
			}
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		},
		Stat: func(name string) (fs.FileInfo, error) {
			if m, ok := h.stats[name]; ok {
				return fakeInfo{path.Base(name), m}, nil
			}
			return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
		},
		OpenRW: func(name string) error {
			if _, ok := h.stats[name]; !ok {
				return &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
			}
			return nil
		},
		Run: func(_ context.Context, name string, args ...string) ([]byte, error) {
			key := strings.Join(append([]string{name}, args...), " ")
			if err, ok := h.failing[key]; ok {
				return nil, err
			}
			if name == "virsh" {
				if err, ok := h.failing["virsh"]; ok {
					return nil, err
				}
			}
			if out, ok := h.commands[key]; ok {
				return []byte(out), nil
			}
			return nil, fmt.Errorf("exit status 1: unexpected command %q", key)
		},
		MIGMode: func(_ context.Context, addr string) (bool, bool, string) {
			on, ok := h.mig[addr]
			if !ok {
				return false, false, "nvidia-smi is not installed"
			}
			return on, true, ""
		},
		Database: func(context.Context) (string, Severity, string) { return h.db() },
		Schema:   func(context.Context) (SchemaVersions, string) { return h.schema, "" },
		Now:      func() time.Time { return h.clock.now },
		Driver: func(context.Context) (Driver, bool, string) {
			if h.driver == nil {
				return Driver{}, false, "no backend answered"
			}
			return *h.driver, true, ""
		},
		LicenseServer: h.license,
		LicenseToken:  h.token,
		Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
			if h.dialErr != nil {
				return nil, h.dialErr
			}
			a, b := net.Pipe()
			b.Close()
			return a, nil
		},
		RemoteClock: h.clock,
	}
}

var errNotFound = &exec.Error{Name: "virsh", Err: exec.ErrNotFound}

// errPoolMissing is virsh's answer about a pool libvirt does not have.
var errPoolMissing = errors.New("exit status 1: error: failed to get pool 'gpuvm'\nerror: Storage pool not found: no storage pool with matching name 'gpuvm'")
