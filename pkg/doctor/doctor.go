// Package doctor checks that a GPU server is ready for gpuvm: the IOMMU, the
// vfio modules, the NVIDIA host driver, each GPU's mode against the
// configuration, libvirt and QEMU, /dev/kvm, the storage pool and the
// database. Every finding says what was seen and the command that fixes it.
//
// It is pure Go (the CLI runs it, CGO_ENABLED=0): sysfs through host.SysFS
// (the real /sys, a captured tree or the simulator), other files and
// commands (virsh, nvidia-smi) through the seams of Env, which tests fill;
// so are the database (its schema, its server's clock), the driver as NVML
// reports it (read by a backend) and the licence server.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/quota"
)

// Severity of a finding.
type Severity string

const (
	OK      Severity = "ok"
	Warning Severity = "warning" // works, but not as it should; exit 0
	Error   Severity = "error"   // gpuvm cannot work as configured; exit 1
	Skipped Severity = "skipped" // could not be checked here (said why)
)

// Finding is one check's outcome.
type Finding struct {
	Check    string   `json:"check"`             // "iommu", "gpu-mode", …
	Subject  string   `json:"subject,omitempty"` // a GPU's address, the pool's name
	Severity Severity `json:"severity"`
	Seen     string   `json:"seen"`          // what was seen
	Fix      string   `json:"fix,omitempty"` // the command that fixes it
}

// Report is every finding of one run, in check order.
type Report struct {
	Host     string    `json:"host"` // "/sys", "captured tree DIR", "simulated …"
	Findings []Finding `json:"findings"`
}

// Problems counts the findings of severity Error.
func (r Report) Problems() int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == Error {
			n++
		}
	}
	return n
}

// Env is the host as the checks see it.
type Env struct {
	// Sys is sysfs: host.NewDir("/sys"), a captured tree, or the simulator.
	Sys host.SysFS
	// ReadFile reads a file outside sysfs (/proc/cmdline, /proc/driver/…).
	ReadFile func(name string) ([]byte, error)
	// Stat stats a file outside sysfs (/dev/kvm, /usr/lib/nvidia/sriov-manage).
	Stat func(name string) (fs.FileInfo, error)
	// OpenRW opens a device for reading and writing and closes it (/dev/kvm).
	OpenRW func(name string) error
	// Run runs a command and returns its standard output; a missing
	// command's error satisfies errors.Is(err, exec.ErrNotFound).
	Run func(ctx context.Context, name string, args ...string) ([]byte, error)
	// MIGMode reports whether MIG mode is enabled on the GPU at addr; ok is
	// false when it cannot be known here (no NVML, no nvidia-smi).
	MIGMode func(ctx context.Context, addr string) (enabled, ok bool, why string)
	// Database reports the database's schema version, or why it cannot.
	Database func(ctx context.Context) (seen string, sev Severity, fix string)
	// Schema reads the database's schema version and the installed
	// gpuvmd's; why says what could not be read.
	Schema func(ctx context.Context) (v SchemaVersions, why string)
	// RemoteClock is the database server's clock (PostgreSQL); nil with
	// NoRemoteClock saying why there is none (SQLite: one server).
	RemoteClock   RemoteClock
	NoRemoteClock string
	// Now is this host's clock (time.Now when nil).
	Now func() time.Time
	// Driver reads the NVIDIA host driver through NVML (a backend does);
	// ok is false when it cannot be read here.
	Driver func(ctx context.Context) (d Driver, ok bool, why string)
	// LicenseServer is the licence server ("host:port") when licensing is
	// configured and says it; "" when it is not.
	LicenseServer string
	// LicenseToken is the client configuration token file of the server's
	// licensing block; "" without one.
	LicenseToken string
	// Dial connects to the licence server (net.Dialer when nil).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Config is the configuration in /etc/gpuvm (an empty one without).
	Config *config.Config
	// Simulated names the simulator preset when Sys is the simulator.
	Simulated string
	// VhostUserDirs are where QEMU's vhost-user descriptors are (nil:
	// homes.DescriptorDirs).
	VhostUserDirs []string
	// ProbeQuotas says what a directory's filesystem does about project
	// quotas (quota.Probe when nil).
	ProbeQuotas func(dir string) (quota.Enforcement, error)
	// ImageHomes says why homes cannot be filesystem images under a
	// root, nil where they can (homes.ImageSupport when nil).
	ImageHomes func(root string) error
}

// OSEnv fills the seams that a caller left nil with the real machine's.
func (e *Env) OSEnv() {
	if e.ReadFile == nil {
		e.ReadFile = os.ReadFile
	}
	if e.Stat == nil {
		e.Stat = os.Stat
	}
	if e.OpenRW == nil {
		e.OpenRW = func(name string) error {
			f, err := os.OpenFile(name, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			return f.Close()
		}
	}
	if e.Run == nil {
		e.Run = runCommand
	}
	if e.ProbeQuotas == nil {
		e.ProbeQuotas = quota.Probe
	}
	if e.ImageHomes == nil {
		e.ImageHomes = homes.ImageSupport
	}
	if e.Config == nil {
		e.Config = &config.Config{}
	}
}

// Run runs every check.
func Run(ctx context.Context, e Env) Report {
	e.OSEnv()
	r := Report{Host: e.Sys.Describe()}
	add := func(f ...Finding) { r.Findings = append(r.Findings, f...) }
	gpus, gerr := host.ListGPUs(e.Sys)
	modes := configuredModes(e.Config, gpus)
	add(checkIOMMU(e))
	add(checkVFIO(e, modes))
	add(checkDriver(e, gpus, gerr, modes)...)
	add(checkGPUs(ctx, e, gpus)...)
	add(checkLibvirt(ctx, e)...)
	add(checkKVM(e)...)
	add(checkVirtiofsd(ctx, e)) // homes.go
	add(checkHomeQuotas(e))     // homes.go
	add(checkShares(e)...)      // shares.go
	add(checkMemlock(e))
	add(checkDatabase(ctx, e))
	add(checkSchema(ctx, e))
	add(checkClock(ctx, e))
	add(checkDriverBranch(ctx, e, modes))
	add(checkLicensing(ctx, e))
	add(checkLicenseToken(e))
	return r
}

// WriteText writes the report for people: one line per finding, its fix
// indented under it, and a summary.
func WriteText(w io.Writer, r Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "gpuvm doctor on %s\n\n", r.Host)
	warnings := 0
	for _, f := range r.Findings {
		subject := f.Check
		if f.Subject != "" {
			subject += " " + f.Subject
		}
		fmt.Fprintf(&b, "%-8s %-28s %s\n", strings.ToUpper(string(f.Severity)), subject, f.Seen)
		if f.Fix != "" && f.Severity != OK {
			for _, l := range strings.Split(f.Fix, "\n") {
				fmt.Fprintf(&b, "%-8s %-28s   fix: %s\n", "", "", l)
			}
		}
		if f.Severity == Warning {
			warnings++
		}
	}
	switch p := r.Problems(); {
	case p == 0 && warnings == 0:
		b.WriteString("\nAll good.\n")
	default:
		fmt.Fprintf(&b, "\n%d problem(s), %d warning(s).\n", p, warnings)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as JSON.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
