package doctor

import (
	"fmt"
	"slices"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/shares"
)

// checkShares: each declared share's directory is there, and a share that
// is read-only for someone can be enforced (a read-only bind mount, which
// needs root). A missing directory is a warning: gpuvmd starts without
// it, and VMs with the share fail to start until it is there.
func checkShares(e Env) []Finding {
	all := e.Config.Server.Storage.Shares
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []Finding
	for _, n := range names {
		out = append(out, checkShare(all[n], shares.CanEnforceReadOnly()))
	}
	return out
}

// checkShare is one share's finding; enforce is why read-only cannot be
// enforced here (nil when it can).
func checkShare(s *config.Share, enforce error) Finding {
	f := Finding{Check: "share", Subject: s.Name}
	if err := shares.Available(s.Path); err != nil {
		f.Severity, f.Seen = Warning, err.Error()+": the share is unavailable, and VMs with it do not start"
		f.Fix = "mkdir -p " + s.Path + " (or mount the disk that holds it)"
		return f
	}
	if len(s.ReadOnly) == 0 {
		f.Severity, f.Seen = OK, fmt.Sprintf("%s, read-write only (mounted at %s)", s.Path, s.Mount)
		return f
	}
	if enforce != nil {
		f.Severity = Warning
		f.Seen = fmt.Sprintf("%s: read-only for %d principal(s), but %v; VMs that would get it read-only do not start (run gpuvmd as root)", s.Path, len(s.ReadOnly), enforce)
		return f
	}
	f.Severity, f.Seen = OK, fmt.Sprintf("%s, read-only enforcement: %s under state_dir/%s", s.Path, shares.EnforcedBindMount, shares.DirName)
	return f
}
