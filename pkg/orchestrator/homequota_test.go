package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/logtest"
	"github.com/gpuvm/gpuvm/pkg/quota"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

func homeQuotaConfig(t *testing.T, root, annQuota string) *config.Config {
	t.Helper()
	user := ""
	if annQuota != "" {
		user = "user \"ann\" {\n storage {\n  home_quota = \"" + annQuota + "\"\n }\n}"
	}
	cfg, diags := config.Parse(config.Source{Name: "q.hcl", Data: []byte(`
server {
 storage {
  homes {
   root = "` + root + `"
  }
 }
}
policy {
` + user + `
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return cfg
}

// homeQuotaEnv: homes of ann (16 MiB quota) and bob (none) under a temp
// root, ann's usage what *used says.
func homeQuotaEnv(t *testing.T, ops quotaOps) (*HomeQuotas, *store.Store, *atomic.Pointer[config.Config], string) {
	t.Helper()
	ctx := context.Background()
	root := t.TempDir()
	st := storetest.New(t)
	for _, u := range []string{"ann", "bob"} {
		if err := st.CreateUser(ctx, &store.User{Name: u}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.UserUID(ctx, u, 20000, 59999); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(root, u), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "lost+found"), 0o700); err != nil { // no person's
		t.Fatal(err)
	}
	// The homes' lock files, beside the homes: never a home, even where
	// the store had a row of that name (no user name can be it).
	if err := os.Mkdir(filepath.Join(root, homes.LocksDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateUser(ctx, &store.User{Name: homes.LocksDir}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UserUID(ctx, homes.LocksDir, 20000, 59999); err != nil {
		t.Fatal(err)
	}
	var cfg atomic.Pointer[config.Config]
	cfg.Store(homeQuotaConfig(t, root, "16MiB"))
	log, _ := logtest.New()
	q := newHomeQuotas(st, cfg.Load, log, 0)
	if ops.images == nil {
		ops.images = func(string) error { return fmt.Errorf("%w: the test says so", homes.ErrNoImages) }
	}
	if ops.imageOf == nil { // every home a directory
		ops.imageOf = func(context.Context, string, string, uint64, *slog.Logger) (homes.Image, bool, error) {
			return homes.Image{}, false, nil
		}
	}
	q.ops = ops
	return q, st, &cfg, root
}

func warnings(t *testing.T, st *store.Store) []api.VolumeWarningPayload {
	t.Helper()
	es, err := st.ListEventsSince(context.Background(), 0, store.EventFilter{Type: api.EventVolumeWarning})
	if err != nil {
		t.Fatal(err)
	}
	var out []api.VolumeWarningPayload
	for _, e := range es {
		var p api.VolumeWarningPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if e.Owner != p.Owner || e.VMID != "" {
			t.Errorf("event %+v: want the owner's, of no VM", e)
		}
		out = append(out, p)
	}
	return out
}

// Without project quotas: homes are measured by the walk, ann is warned
// once at 90 % of her quota, not again while she stays above, and again
// after she went below and came back; bob, without a quota, never.
func TestHomeQuotaWarnsOnce(t *testing.T) {
	var used atomic.Uint64
	ops := quotaOps{
		probe: func(string) (quota.Enforcement, error) {
			return quota.Enforcement{Mode: quota.None, FSType: "tmpfs", Why: "tmpfs has no project quotas gpuvm can use"}, nil
		},
		walk: func(_ context.Context, dir string, _ int) (uint64, error) {
			if filepath.Base(dir) == "ann" {
				return used.Load(), nil
			}
			return 1 << 40, nil
		},
	}
	q, st, _, root := homeQuotaEnv(t, ops)
	ctx := context.Background()
	for i, step := range []struct {
		used  uint64
		warns int
	}{
		{10 << 20, 0}, {14 << 20, 0}, {15 << 20, 1}, {16 << 20, 1}, {20 << 20, 1}, {8 << 20, 1}, {15 << 20, 2},
	} {
		used.Store(step.used)
		q.Round(ctx)
		if w := warnings(t, st); len(w) != step.warns {
			t.Fatalf("round %d (%d bytes): %d warnings, want %d", i, step.used, len(w), step.warns)
		}
	}
	w := warnings(t, st)[0]
	if w.Owner != "ann" || w.Kind != api.VolumeHome || w.Percent != 93 || w.QuotaBytes == nil || *w.QuotaBytes != 16<<20 ||
		!strings.Contains(w.Reason, "16MiB") || w.Enforcement != quota.None {
		t.Errorf("warning %+v", w)
	}
	rows := q.Usage()
	if len(rows) != 2 || rows[0].Owner != "ann" || rows[0].UsedBytes != 15<<20 || rows[1].Owner != "bob" || rows[1].QuotaBytes != nil {
		t.Fatalf("usage %+v", rows)
	}
	if !strings.Contains(rows[0].Note, "the homes at "+root+" are on tmpfs without project quotas") ||
		!strings.Contains(rows[0].Note, "writes past the quota are not refused") {
		t.Errorf("note %q", rows[0].Note)
	}
}

// With project quotas: each home gets its person's uid as project and
// the policy's limit; a reload that drops the limit clears it.
func TestHomeQuotaProject(t *testing.T) {
	projects := map[string]uint32{}
	limits := map[uint32]uint64{}
	ops := quotaOps{
		probe: func(string) (quota.Enforcement, error) {
			return quota.Enforcement{Mode: quota.Project, FSType: "ext4", Device: "/dev/block/7:0"}, nil
		},
		setProject: func(dir string, id uint32) error { projects[filepath.Base(dir)] = id; return nil },
		setLimit: func(dev string, id uint32, b uint64) error {
			if dev != "/dev/block/7:0" {
				t.Errorf("device %q", dev)
			}
			limits[id] = (b + 1023) / 1024 * 1024
			return nil
		},
		get: func(_ string, id uint32) (quota.Usage, error) {
			return quota.Usage{Used: 3 << 20, Limit: limits[id]}, nil
		},
	}
	q, st, cfg, root := homeQuotaEnv(t, ops)
	ctx := context.Background()
	q.Round(ctx)
	ann, _ := st.GetUser(ctx, "ann")
	bob, _ := st.GetUser(ctx, "bob")
	if projects["ann"] != uint32(*ann.UID) || projects["bob"] != uint32(*bob.UID) || len(projects) != 2 {
		t.Fatalf("projects %v, want the uids %d and %d", projects, *ann.UID, *bob.UID)
	}
	if limits[uint32(*ann.UID)] != 16<<20 || limits[uint32(*bob.UID)] != 0 {
		t.Errorf("limits %v", limits)
	}
	if rows := q.Usage(); len(rows) != 2 || rows[0].UsedBytes != 3<<20 || rows[0].Enforcement != quota.Project || rows[0].Note != "" {
		t.Errorf("usage %+v", rows)
	}
	cfg.Store(homeQuotaConfig(t, root, ""))
	q.Round(ctx)
	if limits[uint32(*ann.UID)] != 0 {
		t.Errorf("after the reload ann's limit is %d, want none", limits[uint32(*ann.UID)])
	}
	// As a VM gets the home: the limit is applied at once.
	cfg.Store(homeQuotaConfig(t, root, "1GiB"))
	hq, err := q.ForStart(ctx, cfg.Load(), root, "ann")
	if err != nil || hq.ImageBytes() != 0 {
		t.Fatalf("ForStart: %+v %v, want no image where there are project quotas", hq, err)
	}
	if err := q.Apply(hq, filepath.Join(root, "ann"), *ann.UID); err != nil {
		t.Fatal(err)
	}
	if limits[uint32(*ann.UID)] != 1<<30 {
		t.Errorf("Ensure: limit %d", limits[uint32(*ann.UID)])
	}
}

// Without project quotas, where images can be made: ann's home, an image
// home, is read from its filesystem (ImageOf, asked for her quota), and
// says when it is not the size of her quota (not yet grown, or not
// shrunk); bob's, a directory, is walked and says it is not limited; a
// home made now is an image of its person's quota (ForStart's ImageBytes), none for
// a person without one or where images cannot be made.
func TestHomeQuotaImage(t *testing.T) {
	asked := map[string]uint64{}
	size := uint64(16 << 20)
	ops := quotaOps{
		probe: func(string) (quota.Enforcement, error) {
			return quota.Enforcement{Mode: quota.None, FSType: "ext4", Why: "ext4 mounted without prjquota"}, nil
		},
		images: func(string) error { return nil },
		imageOf: func(_ context.Context, _, login string, want uint64, _ *slog.Logger) (homes.Image, bool, error) {
			asked[login] = want
			if login != "ann" {
				return homes.Image{}, false, nil
			}
			return homes.Image{Size: size, Used: 3 << 20, Capacity: size - 1<<20}, true, nil
		},
		walk: func(context.Context, string, int) (uint64, error) { return 5 << 20, nil },
	}
	q, st, cfg, root := homeQuotaEnv(t, ops)
	ctx := context.Background()
	q.Round(ctx)
	rows := q.Usage()
	if len(rows) != 2 || rows[0].Owner != "ann" || rows[0].Enforcement != quota.Image || rows[0].UsedBytes != 3<<20 || rows[0].Note != "" {
		t.Fatalf("ann's row %+v", rows)
	}
	if rows[1].Owner != "bob" || rows[1].Enforcement != quota.None || rows[1].UsedBytes != 5<<20 || !strings.Contains(rows[1].Note, "made as a directory") {
		t.Errorf("bob's row %+v", rows[1])
	}
	if asked["ann"] != 16<<20 || asked["bob"] != 0 {
		t.Errorf("ImageOf asked for %v, want ann's quota and nothing for bob", asked)
	}
	for _, tc := range []struct{ quota, note string }{
		{"32MiB", "grows to its quota the next time none of your VMs runs"},
		{"", "is not shrunk when its quota is lowered or lifted"},
		{"1MiB", "less than the smallest home filesystem"},
	} {
		if tc.quota == "1MiB" {
			size = homes.MinImage
		}
		cfg.Store(homeQuotaConfig(t, root, tc.quota))
		q.Round(ctx)
		if rows := q.Usage(); !strings.Contains(rows[0].Note, tc.note) || !strings.Contains(rows[0].Note, "16MiB") {
			t.Errorf("quota %q: ann's note %q, want %q", tc.quota, rows[0].Note, tc.note)
		}
	}
	if w := warnings(t, st); len(w) != 1 || w[0].Enforcement != quota.Image || !strings.HasSuffix(w[0].Reason, "writes past the quota will fail") {
		t.Errorf("warnings %+v, want one, at the 1MiB quota", w)
	}
	// Full: warned near what the image holds (its filesystem's bookkeeping
	// left out), not only near the quota, which it cannot reach.
	cfg.Store(homeQuotaConfig(t, root, "16MiB"))
	q.ops.imageOf = func(context.Context, string, string, uint64, *slog.Logger) (homes.Image, bool, error) {
		return homes.Image{Size: 16 << 20, Used: 12 << 20, Capacity: 14 << 20}, true, nil
	}
	q.Round(ctx) // below 90 % (of 14MiB): the 1MiB quota's warning is withdrawn
	q.ops.imageOf = func(context.Context, string, string, uint64, *slog.Logger) (homes.Image, bool, error) {
		return homes.Image{Size: 16 << 20, Used: 13<<20 + 512<<10, Capacity: 14 << 20}, true, nil
	}
	q.Round(ctx)
	if w := warnings(t, st); len(w) != 2 || w[1].Percent != 96 || !strings.Contains(w[1].Reason, "of the 14MiB it can hold (96 %; its quota is 16MiB") {
		t.Errorf("warnings %+v, want a second, of 96 %% of what the image holds", w)
	}
	cfg.Store(homeQuotaConfig(t, root, "1GiB"))
	imageBytes := func(login string) uint64 {
		t.Helper()
		hq, err := q.ForStart(ctx, cfg.Load(), root, login)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Apply(hq, filepath.Join(root, login), 20000); err != nil {
			t.Errorf("Apply of an image home: %v, want nothing to apply", err)
		}
		return hq.ImageBytes()
	}
	if got := imageBytes("ann"); got != 1<<30 {
		t.Errorf("ann's image: %d bytes, want her 1GiB quota", got)
	}
	if got := imageBytes("bob"); got != 0 {
		t.Errorf("bob, without a quota: an image of %d bytes, want a directory", got)
	}
	q.ops.images = func(string) error { return homes.ErrNoImages }
	if got := imageBytes("ann"); got != 0 {
		t.Errorf("without images: an image of %d bytes, want a directory", got)
	}
}

// Shares with a quota: the project quota where the share's filesystem
// has one (the share's project, config.ShareProject, with its limit),
// else a walk, said not enforced; one near its quota warns the admins (an
// event of no owner); a share without a quota is not read.
func TestShareQuota(t *testing.T) {
	data, team, free := t.TempDir(), t.TempDir(), t.TempDir()
	cfg, diags := config.Parse(config.Source{Name: "s.hcl", Data: []byte(fmt.Sprintf(`
server {
 storage {
  share "data" {
   path = %q
   read_only = ["group:s"]
   quota = "10MiB"
  }
  share "team" {
   path = %q
   read_write = ["group:s"]
   quota = "1GiB"
  }
  share "free" {
   path = %q
   read_write = ["group:s"]
  }
 }
}
`, data, team, free))})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	projects, limits, walked := map[string]uint32{}, map[uint32]uint64{}, map[string]bool{}
	ops := quotaOps{
		probe: func(dir string) (quota.Enforcement, error) {
			if dir == data {
				return quota.Enforcement{Mode: quota.Project, FSType: "xfs", Device: "/dev/block/8:1"}, nil
			}
			return quota.Enforcement{Mode: quota.None, FSType: "ext4", Why: "mounted without prjquota"}, nil
		},
		setProject: func(dir string, id uint32) error { projects[dir] = id; return nil },
		setLimit:   func(_ string, id uint32, b uint64) error { limits[id] = (b + 1023) / 1024 * 1024; return nil },
		get: func(_ string, id uint32) (quota.Usage, error) {
			return quota.Usage{Used: 9<<20 + 512<<10, Limit: limits[id]}, nil
		},
		walk:   func(_ context.Context, dir string, _ int) (uint64, error) { walked[dir] = true; return 100 << 20, nil },
		images: func(string) error { return homes.ErrNoImages },
	}
	st := storetest.New(t)
	log, _ := logtest.New()
	q := newHomeQuotas(st, func() *config.Config { return cfg }, log, 0)
	q.ops = ops
	ctx := context.Background()
	q.Round(ctx)
	q.Round(ctx) // once warned, not again
	id := config.ShareProject("data")
	if projects[data] != id || limits[id] != 10<<20 || len(projects) != 1 {
		t.Errorf("projects %v, limits %v: want data's project %d with 10MiB", projects, limits, id)
	}
	if !walked[team] || walked[free] || walked[data] {
		t.Errorf("walked %v: want team's directory only", walked)
	}
	rows := q.Usage()
	if len(rows) != 2 || rows[0].Kind != api.VolumeShare || rows[0].Name != "data" || rows[0].Enforcement != quota.Project || rows[0].UsedBytes != 9<<20+512<<10 ||
		rows[1].Name != "team" || rows[1].Enforcement != quota.None || !strings.Contains(rows[1].Note, "the files of share team at "+team) {
		t.Fatalf("rows %+v", rows)
	}
	es, err := st.ListEventsSince(ctx, 0, store.EventFilter{Type: api.EventVolumeWarning})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Owner != "" {
		t.Fatalf("warnings %+v: want one, the admins'", es)
	}
	var w api.VolumeWarningPayload
	if err := json.Unmarshal(es[0].Payload, &w); err != nil {
		t.Fatal(err)
	}
	if w.Kind != api.VolumeShare || w.Name != "data" || w.Percent != 95 || w.Reason != "share data uses 9.5MiB of its 10MiB quota (95 %); writes past the quota will fail" {
		t.Errorf("warning %+v", w)
	}
}
