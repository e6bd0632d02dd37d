package doctor

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/shares"
)

func TestCheckShare(t *testing.T) {
	dir := t.TempDir()
	notRoot := errors.Join(shares.ErrNotEnforceable, errors.New("gpuvmd is not root"))
	for _, tc := range []struct {
		name    string
		s       config.Share
		enforce error
		sev     Severity
		seen    string
	}{
		{"missing", config.Share{Name: "d", Path: dir + "/missing", ReadOnly: []string{"user:a"}}, nil, Warning, "unavailable"},
		{"rw only", config.Share{Name: "d", Path: dir, Mount: "/gpuvm/shares/d", ReadWrite: []string{"user:a"}}, notRoot, OK, "read-write only"},
		{"ro, root", config.Share{Name: "d", Path: dir, ReadOnly: []string{"user:a"}}, nil, OK, shares.EnforcedBindMount},
		{"ro, not root", config.Share{Name: "d", Path: dir, ReadOnly: []string{"user:a"}}, notRoot, Warning, "run gpuvmd as root"},
	} {
		f := checkShare(&tc.s, tc.enforce)
		if f.Severity != tc.sev || !strings.Contains(f.Seen, tc.seen) || f.Subject != "d" {
			t.Errorf("%s: %+v; want %s with %q", tc.name, f, tc.sev, tc.seen)
		}
	}
}
