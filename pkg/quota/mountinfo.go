package quota

import (
	"fmt"
	"strconv"
	"strings"
)

// Mount is one line of /proc/self/mountinfo (proc(5)), the fields quota
// needs.
type Mount struct {
	Major, Minor uint32
	MountPoint   string
	FSType       string
	Source       string
	Options      string // per-mount and superblock options, comma-separated
}

// ParseMountinfo reads /proc/self/mountinfo's text: "36 35 98:0 /mnt1
// /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue". Spaces
// and other characters in paths are escaped as \040 (octal).
func ParseMountinfo(text string) ([]Mount, error) {
	var out []Mount
	for n, line := range strings.Split(text, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 6 || sep < 0 || len(f) < sep+3 {
			return nil, fmt.Errorf("mountinfo line %d: %q: want ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS ... - TYPE SOURCE OPTIONS", n+1, line)
		}
		maj, min, ok := strings.Cut(f[2], ":")
		ma, err1 := strconv.ParseUint(maj, 10, 32)
		mi, err2 := strconv.ParseUint(min, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("mountinfo line %d: device %q: want MAJOR:MINOR", n+1, f[2])
		}
		opts := f[5]
		if len(f) > sep+3 {
			opts += "," + f[sep+3]
		}
		out = append(out, Mount{Major: uint32(ma), Minor: uint32(mi), MountPoint: unescapeOctal(f[4]),
			FSType: f[sep+1], Source: unescapeOctal(f[sep+2]), Options: opts})
	}
	return out, nil
}

// MountOf is the mount of the device major:minor whose mount point holds
// path, the deepest (the last mounted, when several have the same).
func MountOf(mounts []Mount, major, minor uint32, path string) (Mount, bool) {
	var best Mount
	found := false
	for _, m := range mounts {
		if m.Major != major || m.Minor != minor || !under(path, m.MountPoint) {
			continue
		}
		if !found || len(m.MountPoint) >= len(best.MountPoint) {
			best, found = m, true
		}
	}
	return best, found
}

// under: path is dir or inside it.
func under(path, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// HasOption: opts (comma-separated) has o, alone or as o=value.
func HasOption(opts, o string) bool {
	for _, x := range strings.Split(opts, ",") {
		if x == o || strings.HasPrefix(x, o+"=") {
			return true
		}
	}
	return false
}

// unescapeOctal undoes the kernel's \NNN escapes of mountinfo.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
