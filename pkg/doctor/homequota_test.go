package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/quota"
)

func TestCheckHomeQuotas(t *testing.T) {
	parse := func(src string) *config.Config {
		cfg, diags := config.Parse(config.Source{Name: "c.hcl", Data: []byte(src)})
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		return cfg
	}
	homesOn := "server {\n storage {\n  homes {\n   root = \"/srv/homes\"\n  }\n }\n}\n"
	withQuota := homesOn + "policy {\n group \"students\" {\n  storage {\n   home_quota = \"10GiB\"\n  }\n }\n}\n"
	none := quota.Enforcement{Mode: quota.None, FSType: "ext4", Why: "/dev/block/259:2 is mounted without project quotas"}
	project := quota.Enforcement{Mode: quota.Project, FSType: "xfs", Device: "/dev/block/259:3"}
	for _, tc := range []struct {
		name  string
		cfg   string
		enf   quota.Enforcement
		err   error
		sev   Severity
		seen  []string
		fixed bool
	}{
		{"homes off", "", none, nil, Skipped, []string{"homes are off"}, false},
		{"project", withQuota, project, nil, OK, []string{"the homes at /srv/homes are on xfs with project quotas", "refused"}, false},
		{"none, a quota set", withQuota, none, nil, Warning, []string{"without project quotas", "not refused", "mounted without project quotas"}, true},
		{"none, no quota", homesOn, none, nil, OK, []string{"without project quotas", "no policy sets storage.home_quota"}, false},
		{"unreadable", homesOn, none, errors.New("permission denied"), Warning, []string{"/srv/homes: permission denied"}, false},
		{"images, a quota set", withQuota, none, nil, OK, []string{"without project quotas", "filesystem image of its size", "writes past it are refused"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var probed string
			e := Env{Config: parse(tc.cfg),
				Stat: func(name string) (fs.FileInfo, error) {
					if name == "/srv" {
						return nil, nil
					}
					return nil, fs.ErrNotExist
				},
				ProbeQuotas: func(dir string) (quota.Enforcement, error) { probed = dir; return tc.enf, tc.err },
				ImageHomes: func(string) error {
					if strings.HasPrefix(tc.name, "images") {
						return nil
					}
					return fmt.Errorf("%w: gpuvmd is not root", homes.ErrNoImages)
				},
			}
			f := checkHomeQuotas(e)
			if f.Check != "home quotas" || f.Severity != tc.sev || (f.Fix != "") != tc.fixed {
				t.Errorf("%+v", f)
			}
			for _, w := range tc.seen {
				if !strings.Contains(f.Seen, w) {
					t.Errorf("seen %q lacks %q", f.Seen, w)
				}
			}
			if tc.sev != Skipped && probed != "/srv" {
				t.Errorf("probed %q, want /srv (the homes root is not made yet)", probed)
			}
		})
	}
}
