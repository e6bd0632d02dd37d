package orchestrator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/quota"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Home quotas.
const (
	// HomeQuotaEvery is how often the homes' usage is read, their limits
	// applied again (a policy reload takes effect within it) and their
	// owners warned.
	HomeQuotaEvery = 5 * time.Minute
	// homeWalkMax bounds the walk that measures a home where there are no
	// project quotas.
	homeWalkMax = 1_000_000
)

// homeQuotaStore is what the home quotas read and write.
type homeQuotaStore interface {
	GetUser(ctx context.Context, name string) (*store.User, error)
	AppendEvent(ctx context.Context, e *store.Event) error
}

// quotaOps are pkg/quota's calls (tests give fakes).
type quotaOps struct {
	probe      func(dir string) (quota.Enforcement, error)
	setProject func(dir string, id uint32) error
	setLimit   func(dev string, id uint32, bytes uint64) error
	get        func(dev string, id uint32) (quota.Usage, error)
	walk       func(ctx context.Context, dir string, max int) (uint64, error)
	// images and imageOf are pkg/homes' image homes (ImageSupport,
	// ImageOf).
	images  func(root string) error
	imageOf func(ctx context.Context, root, login string, want uint64, log *slog.Logger) (homes.Image, bool, error)
}

var realQuotaOps = quotaOps{probe: quota.Probe, setProject: quota.SetProject, setLimit: quota.SetLimit, get: quota.Get, walk: quota.WalkUsage,
	images: homes.ImageSupport, imageOf: homes.ImageOf}

// HomeQuotas keeps each home's quota: policy storage.home_quota, as the
// filesystem's project quota of the project numbered as the person's uid
// (store.UserUID: unique per person, in the homes' uid range, so no two
// homes share a project; other uses of project quotas on the same
// filesystem must keep out of that range). Where the homes' filesystem
// has no project quotas, a home made for a person with a quota is a
// filesystem image of its size (pkg/homes, image.go: ImageBytes says the
// size as a VM's start makes it), grown when the quota grows; where
// images cannot be made either (gpuvmd not root, no loop devices, homes
// on a filesystem hosts share), and for a home made as a directory
// before, homes are measured by a walk, nothing is refused, and the log,
// gpuvm doctor and the volume rows say so. Every
// HomeQuotaEvery it reads the usage (never on a request path), applies
// the limits again and warns a person at api.QuotaWarnPercent.
type HomeQuotas struct {
	st       homeQuotaStore
	profiles func() *config.Config
	log      *slog.Logger
	ops      quotaOps
	every    time.Duration // HomeQuotaEvery unless Config.HomeQuotaEvery says

	mu      sync.Mutex
	usage   []api.VolumeUsage
	warned  map[string]bool // owners warned, until their home goes below
	lastWhy string          // the last "no enforcement" logged
}

func newHomeQuotas(st homeQuotaStore, profiles func() *config.Config, log *slog.Logger, every time.Duration) *HomeQuotas {
	return &HomeQuotas{st: st, profiles: profiles, log: log.With("component", "home-quotas"), ops: realQuotaOps, warned: map[string]bool{},
		every: cmp.Or(every, HomeQuotaEvery)}
}

// Usage is the homes' usage as last read (metrics, listings).
func (q *HomeQuotas) Usage() []api.VolumeUsage {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]api.VolumeUsage(nil), q.usage...)
}

// Run reads the homes every HomeQuotaEvery (Config.HomeQuotaEvery) until
// ctx ends.
func (q *HomeQuotas) Run(ctx context.Context) {
	t := time.NewTicker(q.every)
	defer t.Stop()
	for {
		q.Round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round reads every home under the homes root once, and every share
// with a quota.
func (q *HomeQuotas) Round(ctx context.Context) {
	cfg := q.profiles()
	if cfg == nil {
		q.set(nil)
		return
	}
	rows := append(q.homeRows(ctx, cfg), q.shareRows(ctx, cfg)...)
	q.set(rows)
}

// homeRows reads the homes (none when homes are off).
func (q *HomeQuotas) homeRows(ctx context.Context, cfg *config.Config) []api.VolumeUsage {
	if !cfg.Server.Storage.Homes.Enabled {
		return nil
	}
	root := cfg.Server.Storage.Homes.Root
	ents, err := os.ReadDir(root)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			q.log.Warn("home quotas: the homes root cannot be read", "root", root, "err", err)
		}
		return nil
	}
	enf := q.enforcement(cfg, root)
	var rows []api.VolumeUsage
	for _, e := range ents {
		if !e.IsDir() || ctx.Err() != nil {
			continue
		}
		if _, err := homes.Path(root, e.Name()); err != nil {
			continue // not named as a person: the homes' lock files (homes.LocksDir)
		}
		u, err := q.st.GetUser(ctx, e.Name())
		if err != nil || u.UID == nil {
			continue // not a person's home, or one whose person is gone
		}
		row, holds, err := q.read(ctx, cfg, enf, root, u)
		if err != nil {
			q.log.Warn("home quota", "user", u.Name, "err", err)
		}
		rows = append(rows, row)
		q.warn(ctx, row, holds)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Owner < rows[j].Owner })
	return rows
}

// shareRows reads the shares that have a quota (config.Share.Quota), in
// name order: the filesystem's project quota numbered
// config.ShareProject(name) where the share's directory has project
// quotas (applied as for homes), else a walk, measured only. Their
// warnings go to the admins (an event of no owner).
func (q *HomeQuotas) shareRows(ctx context.Context, cfg *config.Config) []api.VolumeUsage {
	names := make([]string, 0, len(cfg.Server.Storage.Shares))
	for n, sh := range cfg.Server.Storage.Shares {
		if sh.Quota != nil {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	rows := make([]api.VolumeUsage, 0, len(names))
	for _, n := range names {
		if ctx.Err() != nil {
			break
		}
		sh := cfg.Server.Storage.Shares[n]
		row := api.VolumeUsage{Kind: api.VolumeShare, Name: n, QuotaBytes: sh.Quota}
		enf, err := q.ops.probe(sh.Path)
		if err != nil {
			enf = quota.Enforcement{Mode: quota.None, Why: err.Error()}
		}
		row.Enforcement = enf.Mode
		if enf.Mode == quota.Project {
			row.UsedBytes, err = q.apply(enf, sh.Path, config.ShareProject(n), sh.Quota)
		} else {
			row.Note = enf.Describe("the files of share "+n, sh.Path)
			row.UsedBytes, err = q.ops.walk(ctx, sh.Path, homeWalkMax)
		}
		if err != nil {
			q.log.Warn("share quota", "share", n, "path", sh.Path, "err", err)
		}
		rows = append(rows, row)
		q.warn(ctx, row, 0)
	}
	return rows
}

func (q *HomeQuotas) set(rows []api.VolumeUsage) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.usage = rows
}

// enforcement probes the homes root, and logs, when it changes, that
// nothing is enforced. Whether images can be made is only asked (a trial
// mount, once a process) while some rule of the policy sets a home quota.
func (q *HomeQuotas) enforcement(cfg *config.Config, root string) quota.Enforcement {
	images := q.ops.images
	if !cfg.Policy.AnyHomeQuota() {
		images = func(string) error {
			return fmt.Errorf("%w: no rule of the policy sets storage.home_quota", homes.ErrNoImages)
		}
	}
	enf := homes.QuotaEnforcement(root, q.ops.probe, images)
	q.mu.Lock()
	defer q.mu.Unlock()
	why := ""
	if enf.Mode == quota.None {
		why = enf.Describe("the homes", root)
	}
	if why != q.lastWhy && why != "" {
		q.log.Warn(why)
	}
	q.lastWhy = why
	return enf
}

// limit is a person's home quota (nil: none).
func homeLimit(cfg *config.Config, u *store.User) *uint64 {
	return cfg.Policy.Effective(u.Name, u.Groups).Storage.HomeQuota
}

// read applies u's limit to their home and reads its usage. holds, when
// not 0, is what an image home can hold (its filesystem's own bookkeeping
// left out): its person is warned near that rather than the quota.
func (q *HomeQuotas) read(ctx context.Context, cfg *config.Config, enf quota.Enforcement, root string, u *store.User) (row api.VolumeUsage, holds uint64, err error) {
	row = api.VolumeUsage{Kind: api.VolumeHome, Owner: u.Name, Name: u.Name, QuotaBytes: homeLimit(cfg, u), Enforcement: enf.Mode}
	dir, err := homes.Path(root, u.Name)
	if err != nil {
		return row, 0, err
	}
	if enf.Mode == quota.Project {
		row.UsedBytes, err = q.apply(enf, dir, uint32(*u.UID), row.QuotaBytes)
		return row, 0, err
	}
	// An image home is one whatever images are offered now (a reload that
	// lifted every quota, a trial mount refused): it is read as one.
	want := uint64(0)
	if row.QuotaBytes != nil {
		want = homes.ImageSize(*row.QuotaBytes)
	}
	im, isImage, err := q.ops.imageOf(ctx, root, u.Name, want, q.log)
	if isImage {
		return imageRow(row, im, want, err)
	}
	row.Enforcement, row.Note = quota.None, enf.Describe("the homes", root)
	if enf.Mode == quota.Image {
		row.Note = "your home was made as a directory, before it had a quota: its use is measured, writes past the quota are not refused " +
			"(a home made now is a filesystem of its quota's size: copy your files out, delete the home with 'gpuvm home rm " + u.Name +
			" --yes' while none of your VMs runs, and your next VM makes one)"
	}
	row.UsedBytes, err = q.ops.walk(ctx, dir, homeWalkMax)
	return row, 0, err
}

// imageRow is an image home's row as it was read (im, for a quota whose
// image is want bytes; 0: none), with a note when the image is not the
// quota's size, and what it can hold.
func imageRow(row api.VolumeUsage, im homes.Image, want uint64, err error) (api.VolumeUsage, uint64, error) {
	row.Enforcement, row.UsedBytes = quota.Image, im.Used
	switch {
	case err != nil:
	case row.QuotaBytes != nil && *row.QuotaBytes < homes.MinImage && im.Size == homes.MinImage:
		row.Note = fmt.Sprintf("your quota is less than the smallest home filesystem, %s, which is what your home may hold", config.FormatSize(homes.MinImage))
	case row.QuotaBytes == nil || want < im.Size:
		row.Note = fmt.Sprintf("your home is a filesystem of %s, which is what it may hold: an image is not shrunk when its quota is lowered or lifted",
			config.FormatSize(im.Size))
	case want > im.Size:
		row.Note = fmt.Sprintf("your home is a filesystem of %s: it grows to its quota the next time none of your VMs runs", config.FormatSize(im.Size))
	}
	return row, im.Capacity, err
}

// HomeQuota is a person's home quota and how it holds, as a VM's start
// reads them once (HomeQuotas.ForStart).
type HomeQuota struct {
	Enforcement quota.Enforcement
	Limit       *uint64 // nil: none
}

// ImageBytes is the quota a home made now is made with as an image home
// (homes.Ensure): the person's, where the homes' filesystem has no
// project quotas and images can be made; else 0, a directory.
func (h HomeQuota) ImageBytes() uint64 {
	if h.Enforcement.Mode != quota.Image || h.Limit == nil {
		return 0
	}
	return *h.Limit
}

// ForStart reads login's home quota and how it holds under root.
func (q *HomeQuotas) ForStart(ctx context.Context, cfg *config.Config, root, login string) (HomeQuota, error) {
	h := HomeQuota{Enforcement: q.enforcement(cfg, root)}
	if h.Enforcement.Mode == quota.None {
		return h, nil
	}
	u, err := q.st.GetUser(ctx, login)
	if err != nil {
		return h, fmt.Errorf("home quota of %s: %w", login, err)
	}
	h.Limit = homeLimit(cfg, u)
	return h, nil
}

// Apply gives the home at dir its project quota (the project uid, h's
// limit) as a VM of its person gets it: the rounds apply it again. Image
// homes and measured ones have nothing to apply.
func (q *HomeQuotas) Apply(h HomeQuota, dir string, uid int64) error {
	if h.Enforcement.Mode != quota.Project {
		return nil
	}
	_, err := q.apply(h.Enforcement, dir, uint32(uid), h.Limit)
	return err
}

// apply gives dir the project uid and the limit (nil: none, clearing one
// set before), and returns the usage the filesystem counts.
func (q *HomeQuotas) apply(enf quota.Enforcement, dir string, uid uint32, limit *uint64) (uint64, error) {
	if err := q.ops.setProject(dir, uid); err != nil {
		return 0, err
	}
	want := uint64(0)
	if limit != nil {
		want = max(*limit, 1) // 0 would mean none: the smallest limit instead
	}
	u, err := q.ops.get(enf.Device, uid)
	if err != nil {
		return 0, err
	}
	if roundKiB(want) != u.Limit {
		if err := q.ops.setLimit(enf.Device, uid, want); err != nil {
			return u.Used, err
		}
		q.log.Info("quota set", "dir", dir, "project", uid, "bytes", want)
	}
	return u.Used, nil
}

func roundKiB(b uint64) uint64 { return (b + 1023) / 1024 * 1024 }

// warn gives row's owner (the admins for a share: an event of no owner)
// a volume.warning once at api.QuotaWarnPercent of
// the quota (of holds, what an image home can hold, when that is less),
// and again only after the home went below and came back.
func (q *HomeQuotas) warn(ctx context.Context, row api.VolumeUsage, holds uint64) {
	limit := uint64(0)
	if row.QuotaBytes != nil {
		limit = *row.QuotaBytes
		if holds > 0 && holds < limit {
			limit = holds
		}
	}
	over := limit > 0 && row.UsedBytes*100 >= limit*api.QuotaWarnPercent
	key := row.Kind + "/" + row.Owner + "/" + row.Name
	q.mu.Lock()
	was := q.warned[key]
	q.warned[key] = over
	q.mu.Unlock()
	if !over || was {
		return
	}
	pct := int(row.UsedBytes * 100 / limit)
	p := api.VolumeWarningPayload{VolumeUsage: row, Percent: pct,
		Reason: fmt.Sprintf("your home uses %s of its %s quota (%d %%)", config.FormatSize(row.UsedBytes), config.FormatSize(*row.QuotaBytes), pct)}
	if row.Kind == api.VolumeShare {
		p.Reason = fmt.Sprintf("share %s uses %s of its %s quota (%d %%)", row.Name, config.FormatSize(row.UsedBytes), config.FormatSize(*row.QuotaBytes), pct)
	}
	if limit < *row.QuotaBytes {
		p.Reason = fmt.Sprintf("your home uses %s of the %s it can hold (%d %%; its quota is %s, of which its filesystem's own bookkeeping takes the rest)",
			config.FormatSize(row.UsedBytes), config.FormatSize(limit), pct, config.FormatSize(*row.QuotaBytes))
	}
	if row.Enforcement == quota.Project || row.Enforcement == quota.Image {
		p.Reason += "; writes past the quota will fail"
	}
	b, _ := json.Marshal(p)
	if err := q.st.AppendEvent(ctx, &store.Event{Owner: row.Owner, Type: api.EventVolumeWarning, Payload: b}); err != nil {
		q.log.Warn("quota warning not recorded; it is tried again next round", "kind", row.Kind, "user", row.Owner, "name", row.Name, "err", err)
		q.mu.Lock()
		q.warned[key] = false
		q.mu.Unlock()
		return
	}
	q.log.Info("near its quota", "kind", row.Kind, "user", row.Owner, "name", row.Name, "used", row.UsedBytes, "quota", *row.QuotaBytes)
}
