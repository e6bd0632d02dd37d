package doctor

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/licensing"
)

// The checks of what lies beyond this host: the clock against the database
// server's, the NVIDIA driver's branch and the guest drivers it takes, the
// licence server, and the database's schema against the binaries'.

// RemoteClock is a clock this host's is compared with: the PostgreSQL
// server's now(), which every node of a fleet writes its heartbeats and
// leases against.
type RemoteClock interface {
	// Describe names it: "PostgreSQL at db1:5432".
	Describe() string
	// Now reads it.
	Now(ctx context.Context) (time.Time, error)
}

// Clock skew limits: over skewWarn a fleet's nodes disagree on when leases
// end and events happened; over skewError a node's heartbeat looks a
// heartbeat interval late (config.DefaultHeartbeatInterval), and the
// others declare it down sooner than they should.
const (
	skewWarn  = time.Second
	skewError = 15 * time.Second
)

const fixClock = "timedatectl set-ntp true   (systemd-timesyncd or chrony on every node and on the database server; check: timedatectl timesync-status)"

func checkClock(ctx context.Context, e Env) Finding {
	f := Finding{Check: "clock"}
	if e.RemoteClock == nil {
		f.Severity, f.Seen = Skipped, orText(e.NoRemoteClock, "no clock to compare with")
		return f
	}
	f.Subject = e.RemoteClock.Describe()
	now := e.Now
	if now == nil {
		now = time.Now
	}
	t0 := now()
	remote, err := e.RemoteClock.Now(ctx)
	t1 := now()
	if err != nil {
		f.Severity, f.Seen = Warning, "could not read its clock: "+firstLine(err.Error())
		f.Fix = "check database { dsn } in /etc/gpuvm and that the server answers: psql \"$DSN\" -c 'SELECT now()'"
		return f
	}
	// Compared with the middle of the round trip; half of it is the error.
	rtt := t1.Sub(t0)
	skew := remote.Sub(t0.Add(rtt / 2))
	abs := skew
	if abs < 0 {
		abs = -abs
	}
	side := "ahead of"
	if skew < 0 {
		side = "behind"
	}
	seen := fmt.Sprintf("its clock is %s %s this host's (±%s, the round trip's half)", abs.Round(time.Millisecond), side, (rtt / 2).Round(time.Millisecond))
	switch {
	case abs >= skewError:
		f.Severity, f.Seen, f.Fix = Error, seen+fmt.Sprintf(": over %s, this node's heartbeats look late and leases end at the wrong time", skewError), fixClock
	case abs >= skewWarn:
		f.Severity, f.Seen, f.Fix = Warning, seen+fmt.Sprintf(": over %s, leases and events disagree between nodes", skewWarn), fixClock
	default:
		f.Severity, f.Seen = OK, seen
	}
	return f
}

// Driver is the NVIDIA host driver as a backend read it through NVML.
type Driver = gpu.HostDriver

func checkDriverBranch(ctx context.Context, e Env, modes modeSet) Finding {
	f := Finding{Check: "driver-branch"}
	needVGPU := modes.any(gpu.ModeVGPU, gpu.ModeMIG)
	if e.Driver == nil {
		f.Severity, f.Seen = Skipped, "the driver's version is not read here"
		return f
	}
	d, ok, why := e.Driver(ctx)
	switch {
	case !ok:
		f.Severity, f.Seen = Skipped, "the driver's version was not read: "+why
		return f
	case e.Simulated != "":
		f.Severity, f.Seen = Skipped, "the simulator's driver ("+d.Version+") has no branch"
		return f
	}
	b, ok := gpu.DriverBranch(d.Version)
	if !ok {
		f.Severity, f.Seen = Warning, fmt.Sprintf("NVML reports driver version %q, which names no branch", d.Version)
		f.Fix = "check the driver: nvidia-smi --query-gpu=driver_version --format=csv,noheader; cat /proc/driver/nvidia/version"
		return f
	}
	rel, known := gpu.VGPURelease(b)
	switch {
	case needVGPU && d.VGPUMax == "":
		f.Severity = Error
		f.Seen = fmt.Sprintf("driver %s (R%d) reports no supported vGPU versions through NVML: it is not the vGPU manager, and GPUs are configured for vgpu or mig", d.Version, b)
		f.Fix = "install NVIDIA's vGPU host driver (\"Linux KVM\" package of NVIDIA vGPU software), then reboot"
	case needVGPU && !known:
		f.Severity = Warning
		f.Seen = fmt.Sprintf("driver %s: R%d is not a branch of NVIDIA vGPU software gpuvm knows (%s); guests take vGPU %s to %s", d.Version, b, gpu.KnownBranches(), d.VGPUMin, d.VGPUMax)
		f.Fix = "use the vGPU host driver of a released vGPU software branch, and guest drivers of the same release"
	case needVGPU:
		f.Severity = OK
		f.Seen = fmt.Sprintf("driver %s: R%d, vGPU software %d; the vGPU manager takes guest drivers of vGPU %s to %s (install guests' drivers of that range, from the same vGPU software release)", d.Version, b, rel, d.VGPUMin, d.VGPUMax)
	case known:
		f.Severity, f.Seen = OK, fmt.Sprintf("driver %s: R%d (a branch of vGPU software %d); no GPU is configured for vgpu or mig", d.Version, b, rel)
	default:
		f.Severity, f.Seen = OK, fmt.Sprintf("driver %s: R%d; no GPU is configured for vgpu or mig", d.Version, b)
	}
	return f
}

// dialTimeout bounds the licence server's connect.
const dialTimeout = 5 * time.Second

// checkLicenseToken reads the client configuration token gpuvmd gives
// the guests, as it will (licensing.ReadToken): a missing or wrong file
// fails every licensed VM's creation.
func checkLicenseToken(e Env) Finding {
	f := Finding{Check: "licensing-token"}
	if e.LicenseToken == "" {
		f.Severity, f.Seen = Skipped, "not configured"
		return f
	}
	f.Subject = e.LicenseToken
	if _, err := licensing.ReadToken(e.LicenseToken); err != nil {
		f.Severity, f.Seen = Error, firstLine(err.Error())+" (licensed VMs fail to be created)"
		f.Fix = "download the client configuration token from the NVIDIA Licensing Portal or your DLS and put it at " + e.LicenseToken + " (mode 0600, owned by gpuvm)"
		return f
	}
	f.Severity, f.Seen = OK, "a client configuration token"
	return f
}

func checkLicensing(ctx context.Context, e Env) Finding {
	f := Finding{Check: "licensing"}
	if e.LicenseServer == "" {
		f.Severity, f.Seen = Skipped, "no license_server in the licensing configuration"
		return f
	}
	f.Subject = e.LicenseServer
	addr := e.LicenseServer
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "443") // NVIDIA's DLS and CLS answer on HTTPS
	}
	dial := e.Dial
	if dial == nil {
		d := &net.Dialer{}
		dial = func(ctx context.Context, network, address string) (net.Conn, error) {
			return d.DialContext(ctx, network, address)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, err := dial(dctx, "tcp", addr)
	if err != nil {
		f.Severity = Error
		f.Seen = "cannot reach " + addr + ": " + firstLine(err.Error()) + " (licensed vGPU guests run degraded without a licence)"
		f.Fix = "open TCP " + addr + " from this host (firewall, proxy), and check the address in the licensing configuration"
		return f
	}
	_ = c.Close()
	f.Severity, f.Seen = OK, addr+" accepts connections"
	return f
}

// SchemaVersions are the database's schema version and the newest one the
// installed gpuvmd knows; -1 where not known.
type SchemaVersions struct {
	Database int
	// DatabaseFrom says where Database was read: "PostgreSQL",
	// "/var/lib/gpuvm/schema-version (as gpuvmd last opened the SQLite database)".
	DatabaseFrom string
	Binary       int
	// BinaryFrom names the binary: "gpuvmd 1.2.0 (/usr/bin/gpuvmd)".
	BinaryFrom string
}

func checkSchema(ctx context.Context, e Env) Finding {
	f := Finding{Check: "schema"}
	if e.Schema == nil {
		f.Severity, f.Seen = Skipped, "not checked"
		return f
	}
	v, why := e.Schema(ctx)
	switch {
	case v.Binary < 0:
		f.Severity, f.Seen = Skipped, "the installed gpuvmd's schema version is not known: "+orText(why, "gpuvmd not found")
	case v.Database < 0:
		f.Severity, f.Seen = OK, fmt.Sprintf("no database schema yet (%s); %s creates schema version %d at its first start", orText(why, "no database"), v.BinaryFrom, v.Binary)
	case v.Database > v.Binary:
		f.Severity = Error
		f.Seen = fmt.Sprintf("the database is at schema version %d (%s), newer than the %d that %s knows: gpuvmd refuses to start on it", v.Database, v.DatabaseFrom, v.Binary, v.BinaryFrom)
		f.Fix = fmt.Sprintf("install the gpuvm that migrated it (schema %d or newer), or restore a backup from before that upgrade: gpuvmd restore", v.Database)
	case v.Database < v.Binary:
		f.Severity = OK
		f.Seen = fmt.Sprintf("the database is at schema version %d (%s); %s migrates it to %d at its next start (gpuvmd backup first)", v.Database, v.DatabaseFrom, v.BinaryFrom, v.Binary)
	default:
		f.Severity, f.Seen = OK, fmt.Sprintf("schema version %d (%s), as %s knows", v.Database, v.DatabaseFrom, v.BinaryFrom)
	}
	return f
}

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
