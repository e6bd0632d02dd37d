package doctor

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/quota"
)

// checkVirtiofsd: with homes on or shares declared, the virtiofs daemon
// that attaches them, found as libvirt finds it (homes.FindVirtiofsd),
// with its version.
func checkVirtiofsd(ctx context.Context, e Env) Finding {
	f := Finding{Check: "virtiofsd"}
	st := e.Config.Server.Storage
	if !st.Homes.Enabled && len(st.Shares) == 0 {
		f.Severity, f.Seen = Skipped, "homes are off (server.storage.homes) and no share is declared"
		return f
	}
	bin, err := homes.FindVirtiofsd(e.VhostUserDirs)
	if err != nil {
		f.Severity, f.Seen = Error, err.Error()+": VMs with a home or a share are refused"
		f.Fix = "apt-get install " + homes.VirtiofsdPackage
		return f
	}
	out, err := e.Run(ctx, bin, "--version")
	version := firstLine(string(out))
	if err != nil {
		version = "(version unknown: " + err.Error() + ")"
	}
	f.Severity, f.Seen = OK, fmt.Sprintf("%s: %s", bin, orUnknown(version))
	return f
}

// checkHomeQuotas: with homes on, which enforcement of the home quotas
// (policy storage.home_quota) is in force on the homes root's filesystem,
// and why: project quotas refuse writes past a quota, and so do homes made
// as filesystem images of their quota's size where there are none
// (pkg/homes, image.go); without either homes are only measured, which is
// a warning when some person has a quota.
func checkHomeQuotas(e Env) Finding {
	f := Finding{Check: "home quotas"}
	h := e.Config.Server.Storage.Homes
	if !h.Enabled {
		f.Severity, f.Seen = Skipped, "homes are off (server.storage.homes)"
		return f
	}
	dir := h.Root
	for { // the homes root is made with the first home: probe what holds it
		if _, err := e.Stat(dir); err == nil || filepath.Dir(dir) == dir {
			break
		}
		dir = filepath.Dir(dir)
	}
	enf, err := e.ProbeQuotas(dir)
	if err != nil {
		f.Severity, f.Seen = Warning, fmt.Sprintf("the homes at %s: %v", h.Root, err)
		return f
	}
	if enf.Mode != quota.Project && e.ImageHomes != nil {
		probed := enf
		enf = homes.QuotaEnforcement(h.Root, func(string) (quota.Enforcement, error) { return probed, nil }, e.ImageHomes)
	}
	f.Seen = enf.Describe("the homes", h.Root)
	switch {
	case enf.Mode == quota.Project || enf.Mode == quota.Image:
		f.Severity = OK
	case e.Config.Policy.AnyHomeQuota():
		f.Severity, f.Fix = Warning, quota.Fix
	default:
		f.Severity, f.Seen = OK, f.Seen+" (no policy sets storage.home_quota)"
	}
	return f
}

// libvirtdPIDFile is where libvirtd writes its process ID.
const libvirtdPIDFile = "/run/libvirtd.pid"

// checkMemlock: a VM with a GPU device (VFIO) has all its memory locked,
// which shared memory (a home) does not change: QEMU's locked-memory
// limit must be at least the guest's memory plus 1 GiB (libvirt's own
// figure). libvirtd sets that limit on each QEMU it starts when it may
// (as root, or with CAP_SYS_RESOURCE); else its own limit is QEMU's.
func checkMemlock(e Env) Finding {
	f := Finding{Check: "memlock"}
	need, profile := memlockNeed(e.Config)
	if need == 0 {
		f.Severity, f.Seen = Skipped, "no profile has a GPU device"
		return f
	}
	want := fmt.Sprintf("profile %s needs %s of locked memory (its memory plus 1 GiB: VFIO pins all of it)", profile, config.FormatSize(need))
	pid, err := e.ReadFile(libvirtdPIDFile)
	if err != nil {
		f.Severity, f.Seen = Warning, want+"; libvirtd's limit not read ("+err.Error()+")"
		return f
	}
	p := strings.TrimSpace(string(pid))
	status, err1 := e.ReadFile("/proc/" + p + "/status")
	limits, err2 := e.ReadFile("/proc/" + p + "/limits")
	if err1 != nil || err2 != nil {
		f.Severity, f.Seen = Warning, fmt.Sprintf("%s; libvirtd (pid %s) not readable", want, p)
		return f
	}
	if procUID(string(status)) == "0" {
		f.Severity, f.Seen = OK, want+"; libvirtd runs as root and sets it on each QEMU itself"
		return f
	}
	limit, unlimited := memlockLimit(string(limits))
	if unlimited || limit >= need {
		f.Severity, f.Seen = OK, fmt.Sprintf("%s; libvirtd's limit allows it (%s)", want, memlockString(limit, unlimited))
		return f
	}
	f.Severity, f.Seen = Error, fmt.Sprintf("%s; libvirtd's limit is %s: such a VM fails to start", want, memlockString(limit, unlimited))
	f.Fix = "systemctl edit libvirtd: [Service] LimitMEMLOCK=infinity, then systemctl restart libvirtd"
	return f
}

// memlockNeed is the largest locked memory a profile with a GPU needs.
func memlockNeed(c *config.Config) (uint64, string) {
	var need uint64
	var name string
	for n, p := range c.Profiles {
		if p == nil || p.GPU == nil {
			continue
		}
		if m := p.Memory + 1<<30; m > need || (m == need && n < name) {
			need, name = m, n
		}
	}
	return need, name
}

// procUID is the real uid of a /proc/PID/status.
func procUID(status string) string {
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "Uid:") {
			if f := strings.Fields(l); len(f) > 1 {
				return f[1]
			}
		}
	}
	return ""
}

// memlockLimit is the soft "Max locked memory" of a /proc/PID/limits.
func memlockLimit(limits string) (bytes uint64, unlimited bool) {
	for _, l := range strings.Split(limits, "\n") {
		if !strings.HasPrefix(l, "Max locked memory") {
			continue
		}
		f := strings.Fields(strings.TrimPrefix(l, "Max locked memory"))
		if len(f) == 0 || f[0] == "unlimited" {
			return 0, len(f) > 0
		}
		n, _ := strconv.ParseUint(f[0], 10, 64)
		return n, false
	}
	return 0, false
}

func memlockString(n uint64, unlimited bool) string {
	if unlimited {
		return "unlimited"
	}
	return config.FormatSize(n)
}
