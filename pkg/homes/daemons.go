package homes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// libvirt starts a virtiofs daemon for each <filesystem> of a domain when
// the domain starts, and stops it with the domain; nothing watches it in
// between. A daemon that dies leaves the guest's mount hanging. Its pid is
// in a pid file libvirt wrote: libvirt 9.0 (Debian 12) writes
// <libDir>/domain-<id>-<short>/<alias>-fs.pid, later versions
// <stateDir>/<id>-<short>-<alias>-fs.pid, where <short> is the domain's
// name cut to 20 characters and <alias> the device's (fs0, fs1, ...).

// LibvirtDirs are where libvirt's QEMU driver keeps what it runs for a
// domain, and where the host's processes are.
type LibvirtDirs struct {
	StateDir string // /run/libvirt/qemu
	LibDir   string // /var/lib/libvirt/qemu
	Proc     string // /proc
}

// SystemDirs are those of the system libvirtd (qemu:///system).
var SystemDirs = LibvirtDirs{StateDir: "/run/libvirt/qemu", LibDir: "/var/lib/libvirt/qemu", Proc: "/proc"}

// Daemon is the virtiofs daemon of one filesystem of a running domain.
type Daemon struct {
	Alias   string // the device's alias: fs0, fs1, ...
	PIDFile string
	PID     int
	Alive   bool
	// Why says how it was found dead: "process 4242 is gone", "process
	// 4242 is now ps, not virtiofsd".
	Why string
}

// shortName is libvirt's short name of a running domain
// (virDomainDefGetShortName).
func shortName(id int, name string) string {
	if len(name) > 20 {
		name = name[:20]
	}
	return strconv.Itoa(id) + "-" + name
}

var aliasRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// Daemons are the virtiofs daemons libvirt started for the running domain
// with id and name, found by their pid files; none when the domain has no
// filesystem, or the pid files are not where libvirt of these dirs writes
// them (another libvirt, a session daemon), which is not an error. A pid
// file that cannot be read is.
func Daemons(dirs LibvirtDirs, id int, name string) ([]Daemon, error) {
	if id <= 0 || name == "" {
		return nil, nil
	}
	short := shortName(id, name)
	var files []string
	if dirs.StateDir != "" {
		m, _ := filepath.Glob(filepath.Join(dirs.StateDir, globQuote(short)+"-*-fs.pid"))
		files = append(files, m...)
	}
	if dirs.LibDir != "" {
		m, _ := filepath.Glob(filepath.Join(dirs.LibDir, "domain-"+globQuote(short), "*-fs.pid"))
		files = append(files, m...)
	}
	slices.Sort(files)
	seen := map[string]bool{}
	var out []Daemon
	var errs []error
	for _, f := range files {
		alias := strings.TrimSuffix(filepath.Base(f), "-fs.pid")
		alias = strings.TrimPrefix(alias, short+"-")
		if !aliasRE.MatchString(alias) || seen[alias] {
			continue
		}
		seen[alias] = true
		d, err := readDaemon(dirs.Proc, f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d.Alias = alias
		out = append(out, d)
	}
	return out, errors.Join(errs...)
}

// globQuote escapes the characters filepath.Glob treats specially.
func globQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	return r.Replace(s)
}

// readDaemon reads one pid file and judges its process.
func readDaemon(proc, file string) (Daemon, error) {
	d := Daemon{PIDFile: file}
	b, err := os.ReadFile(file)
	if err != nil {
		return d, fmt.Errorf("virtiofsd pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return d, fmt.Errorf("virtiofsd pid file %s: %q is not a process id", file, strings.TrimSpace(string(b)))
	}
	d.PID = pid
	d.Alive, d.Why, err = alive(proc, pid)
	return d, err
}

// alive says whether pid is a running virtiofs daemon: its /proc entry is
// there, not a zombie, and its command is virtiofsd (a pid taken again by
// another process is a dead daemon).
func alive(proc string, pid int) (bool, string, error) {
	dir := filepath.Join(proc, strconv.Itoa(pid))
	comm, err := os.ReadFile(filepath.Join(dir, "comm"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Sprintf("process %d is gone", pid), nil
	}
	if err != nil {
		return false, "", fmt.Errorf("process %d: %w", pid, err)
	}
	name := strings.TrimSpace(string(comm))
	if !strings.Contains(name, "virtiofsd") {
		return false, fmt.Sprintf("process %d is now %s, not virtiofsd", pid, name), nil
	}
	if stat, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil {
		// pid (comm) S ...: the state follows the last ')'.
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return false, fmt.Sprintf("process %d has exited", pid), nil
		}
	}
	return true, "", nil
}
