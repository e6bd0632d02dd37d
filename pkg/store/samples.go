package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// GPU samples (pkg/monitor writes them every sampling round). A round is one
// transaction; raw rows older than the raw retention are replaced by averages
// over fixed periods (DownsampleSamples), and every row older than the
// downsampled retention is deleted (DeleteSamplesBefore), so the table stays
// bounded by the number of devices times the retention.

// sampleBatch is how many rows one INSERT carries (20 columns each: far
// below SQLite's 32,766 parameters).
const sampleBatch = 200

// InsertSamples writes the samples of one sampling round in one
// transaction. Each needs a host, a GPU address and a time; a zero
// SampleCount is 1, and TakenAt is stored in UTC to the microsecond.
func (s *Store) InsertSamples(ctx context.Context, samples []GPUSample) error {
	if len(samples) == 0 {
		return nil
	}
	rows := make([]GPUSample, len(samples))
	for i, x := range samples {
		switch {
		case x.Host == "" || x.GPUAddress == "":
			return fmt.Errorf("insert %d samples: %w: sample %d has no host or GPU address", len(samples), ErrInvalid, i)
		case x.TakenAt.IsZero():
			return fmt.Errorf("insert %d samples: %w: sample %d of %s has no time", len(samples), ErrInvalid, i, x.GPUAddress)
		case x.Resolution < 0:
			return fmt.Errorf("insert %d samples: %w: sample %d has resolution %d", len(samples), ErrInvalid, i, x.Resolution)
		}
		x.ID = 0
		x.TakenAt = x.TakenAt.UTC().Truncate(time.Microsecond)
		if x.SampleCount <= 0 {
			x.SampleCount = 1
		}
		rows[i] = x
	}
	err := s.Tx(ctx, func(tx *Store) error {
		return tx.db.WithContext(ctx).CreateInBatches(rows, sampleBatch).Error
	})
	if err != nil {
		return wrap(err, nil, "insert %d samples", len(samples))
	}
	for i := range rows {
		samples[i].ID = rows[i].ID
	}
	return nil
}

// DownsampleResult says what DownsampleSamples did.
type DownsampleResult struct {
	Raw     int64 // raw rows averaged and deleted
	Rows    int64 // downsampled rows written
	Periods int   // chunks of time processed, one transaction each
}

// downsampleChunk bounds the time one transaction of DownsampleSamples
// covers, so that a backlog (gpuvmd was down for days) is worked off in
// short transactions.
const downsampleChunk = time.Hour

// DownsampleSamples replaces a host's raw samples taken before `before` by
// one row per device, VM and period: the average of the period's samples
// (ratios, temperature, power, clock and memory over the samples that
// reported them; XID errors summed; ECC errors the largest count), taken at
// the period's start, with Resolution the period in seconds and
// SampleCount the raw samples it stands for. `before` is rounded down to a
// period boundary, so a period is always averaged whole. Each hour of
// samples is one transaction: the averages are written and the raw rows
// deleted together.
//
// Only the host's own rows are touched, so that the gpuvmds sharing a
// database never average the same rows twice.
func (s *Store) DownsampleSamples(ctx context.Context, host string, before time.Time, period time.Duration) (DownsampleResult, error) {
	var res DownsampleResult
	if host == "" {
		return res, fmt.Errorf("downsample samples: %w: no host", ErrInvalid)
	}
	if period < time.Second || period%time.Second != 0 {
		return res, fmt.Errorf("downsample samples of %s: %w: period %s is not a whole number of seconds", host, ErrInvalid, period)
	}
	before = before.UTC().Truncate(period)
	chunk := max(period, downsampleChunk.Truncate(period))
	for {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("downsample samples of %s: %w", host, err)
		}
		var oldest []GPUSample
		err := s.db.WithContext(ctx).Select("taken_at").
			Where("resolution = 0 AND host = ? AND taken_at < ?", host, before).
			Order("taken_at").Limit(1).Find(&oldest).Error
		if err != nil {
			return res, wrap(err, nil, "downsample samples of %s", host)
		}
		if len(oldest) == 0 {
			return res, nil
		}
		from := oldest[0].TakenAt.UTC().Truncate(period)
		to := from.Add(chunk)
		if to.After(before) {
			to = before
		}
		var raw, written int64
		err = s.Tx(ctx, func(tx *Store) error {
			var rows []GPUSample
			err := tx.db.WithContext(ctx).
				Where("resolution = 0 AND host = ? AND taken_at >= ? AND taken_at < ?", host, from, to).
				Order("taken_at, id").Find(&rows).Error
			if err != nil {
				return err
			}
			out := averageSamples(rows, period)
			if len(out) > 0 {
				if err := tx.db.WithContext(ctx).CreateInBatches(out, sampleBatch).Error; err != nil {
					return err
				}
			}
			del := tx.db.WithContext(ctx).
				Where("resolution = 0 AND host = ? AND taken_at >= ? AND taken_at < ?", host, from, to).
				Delete(&GPUSample{})
			if del.Error != nil {
				return del.Error
			}
			raw, written = del.RowsAffected, int64(len(out))
			return nil
		})
		if err != nil {
			return res, wrap(err, nil, "downsample samples of %s from %s to %s", host, from.Format(time.RFC3339), to.Format(time.RFC3339))
		}
		res.Raw += raw
		res.Rows += written
		res.Periods++
	}
}

// averageSamples groups raw rows by device, VM and period and averages
// each group (see DownsampleSamples).
func averageSamples(rows []GPUSample, period time.Duration) []GPUSample {
	type key struct {
		gpu, instance, vm, user string
		at                      time.Time
	}
	type acc struct {
		out                              GPUSample
		n, xid, ecc, order               int
		util, mem, enc, dec, temp, power mean
		clock, used                      mean
		licAt                            time.Time
	}
	groups := map[key]*acc{}
	for _, r := range rows {
		k := key{r.GPUAddress, r.Instance, r.VMID, r.User, r.TakenAt.UTC().Truncate(period)}
		a := groups[k]
		if a == nil {
			a = &acc{order: len(groups), out: GPUSample{Host: r.Host, GPUAddress: r.GPUAddress, Instance: r.Instance,
				VMID: r.VMID, User: r.User, TakenAt: k.at, Resolution: int(period / time.Second)}}
			groups[k] = a
		}
		n := max(r.SampleCount, 1)
		a.n += n
		a.util.addRatio(r.GPUUtil, n)
		a.mem.addRatio(r.MemUtil, n)
		a.enc.addRatio(r.EncUtil, n)
		a.dec.addRatio(r.DecUtil, n)
		a.temp.addRatio(r.Temperature, n)
		a.power.addRatio(r.PowerWatts, n)
		if r.SMClockMHz > 0 {
			a.clock.add(float64(r.SMClockMHz), n)
		}
		if r.MemTotal > 0 || r.MemUsed > 0 {
			a.used.add(float64(r.MemUsed), n)
		}
		a.out.MemTotal = max(a.out.MemTotal, r.MemTotal)
		a.xid += r.XIDErrors
		a.ecc = max(a.ecc, r.ECCErrors)
		if r.License != "" && !r.TakenAt.Before(a.licAt) {
			a.out.License, a.licAt = r.License, r.TakenAt
		}
	}
	out := make([]GPUSample, len(groups))
	for _, a := range groups {
		o := a.out
		o.SampleCount = a.n
		o.GPUUtil, o.MemUtil, o.EncUtil, o.DecUtil = a.util.value(), a.mem.value(), a.enc.value(), a.dec.value()
		o.Temperature, o.PowerWatts = a.temp.value(), a.power.value()
		if a.clock.n > 0 {
			o.SMClockMHz = int(a.clock.sum/float64(a.clock.n) + 0.5)
		}
		if a.used.n > 0 {
			o.MemUsed = int64(a.used.sum/float64(a.used.n) + 0.5)
		}
		o.XIDErrors, o.ECCErrors = a.xid, a.ecc
		out[a.order] = o
	}
	return out
}

// mean averages the reported values (a negative one is "not reported"),
// each weighing as many samples as it stands for.
type mean struct {
	sum float64
	n   int
}

func (m *mean) addRatio(v float64, n int) {
	if v >= 0 {
		m.add(v, n)
	}
}

func (m *mean) add(v float64, n int) {
	m.sum += v * float64(n)
	m.n += n
}

func (m *mean) value() float64 {
	if m.n == 0 {
		return -1
	}
	return m.sum / float64(m.n)
}

// DeleteSamplesBefore deletes every sample (raw or downsampled, of every
// host) taken before t, and says how many. It bounds the table: raw rows of
// a host that is gone, which nobody downsamples, go too.
func (s *Store) DeleteSamplesBefore(ctx context.Context, t time.Time) (int64, error) {
	t = t.UTC()
	var n int64
	// Two statements, each a range of the (resolution, taken_at) index.
	for _, cond := range []string{"resolution = 0 AND taken_at < ?", "resolution > 0 AND taken_at < ?"} {
		res := s.db.WithContext(ctx).Where(cond, t).Delete(&GPUSample{})
		if res.Error != nil {
			return n, wrap(res.Error, nil, "delete samples before %s", t.Format(time.RFC3339))
		}
		n += res.RowsAffected
	}
	return n, nil
}

// SampleFilter selects the samples ListSamples returns.
type SampleFilter struct {
	Host string // required
	// GPUs only: samples of whole GPUs (Instance empty); else every row.
	GPUsOnly bool
	// GPUAddress, VMID: "" for every GPU, every VM.
	GPUAddress string
	VMID       string
	// Since: samples taken at or after it. Resolution: 0 for raw rows,
	// else the downsampled rows of that many seconds.
	Since      time.Time
	Resolution int
}

// ListSamples lists a host's samples by time (then device): what alert
// rules read back when they start, and what tests check.
func (s *Store) ListSamples(ctx context.Context, f SampleFilter) ([]GPUSample, error) {
	if f.Host == "" {
		return nil, fmt.Errorf("list samples: %w: no host", ErrInvalid)
	}
	q := s.db.WithContext(ctx).Where("host = ? AND resolution = ? AND taken_at >= ?", f.Host, f.Resolution, f.Since.UTC())
	if f.GPUsOnly {
		q = q.Where("instance = ''")
	}
	if f.GPUAddress != "" {
		q = q.Where("gpu_address = ?", f.GPUAddress)
	}
	if f.VMID != "" {
		q = q.Where("vm_id = ?", f.VMID)
	}
	var out []GPUSample
	err := q.Order("taken_at, gpu_address, instance, id").Find(&out).Error
	return out, wrap(err, nil, "list samples of %s since %s", f.Host, f.Since.UTC().Format(time.RFC3339))
}

// SumXIDErrors adds up the XID errors each GPU of a host reported in raw
// samples taken at or after since; GPUs that reported none are left out.
func (s *Store) SumXIDErrors(ctx context.Context, host string, since time.Time) (map[string]int64, error) {
	var rows []struct {
		GPUAddress string
		N          int64
	}
	err := s.db.WithContext(ctx).Model(&GPUSample{}).Select("gpu_address, SUM(xid_errors) AS n").
		Where("resolution = 0 AND taken_at >= ? AND host = ? AND instance = '' AND xid_errors > 0", since.UTC(), host).
		Group("gpu_address").Scan(&rows).Error
	if err != nil {
		return nil, wrap(err, nil, "sum XID errors of %s", host)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.GPUAddress] = r.N
	}
	return out, nil
}

// VMActivity is what a VM's raw samples since some time say about its GPU
// use: the first and last sample that reported a utilisation, and the last
// one at or above the idle threshold (zero when none was).
type VMActivity struct {
	VMID     string
	First    time.Time
	Last     time.Time
	LastBusy time.Time
}

// ListVMActivity reads the activity of each VM in vmIDs from its raw
// samples taken at or after since (samples that did not report a
// utilisation are left out); busy is the utilisation ratio (0..1) at or
// above which a sample counts as busy. A VM without such samples has no
// key. A VM with several devices is busy when any of them is.
func (s *Store) ListVMActivity(ctx context.Context, vmIDs []string, since time.Time, busy float64) (map[string]VMActivity, error) {
	out := make(map[string]VMActivity, len(vmIDs))
	const chunk = 500 // bounded IN lists, as in ListAllocationsForVMs
	for lo := 0; lo < len(vmIDs); lo += chunk {
		ids := vmIDs[lo:min(lo+chunk, len(vmIDs))]
		rows, err := s.db.WithContext(ctx).Model(&GPUSample{}).
			Select("vm_id, MIN(taken_at), MAX(taken_at), MAX(CASE WHEN gpu_util >= ? THEN taken_at END)", busy).
			Where("vm_id IN ? AND resolution = 0 AND taken_at >= ? AND gpu_util >= 0", ids, since.UTC()).
			Group("vm_id").Rows()
		if err != nil {
			return nil, wrap(err, nil, "read the activity of %d vms", len(vmIDs))
		}
		err = func() error {
			defer rows.Close()
			for rows.Next() {
				var id string
				var first, last, lastBusy any
				if err := rows.Scan(&id, &first, &last, &lastBusy); err != nil {
					return err
				}
				a := VMActivity{VMID: id}
				var err error
				if a.First, err = scanTime(first); err == nil {
					if a.Last, err = scanTime(last); err == nil {
						a.LastBusy, err = scanTime(lastBusy)
					}
				}
				if err != nil {
					return fmt.Errorf("vm %s: %w", id, err)
				}
				out[id] = a
			}
			return rows.Err()
		}()
		if err != nil {
			return nil, wrap(err, nil, "read the activity of %d vms", len(vmIDs))
		}
	}
	return out, nil
}

// sqliteTimeLayouts are the forms in which the SQLite driver writes times
// (the first) and others it may meet; an aggregate (MIN, MAX) of a
// timestamp column comes back as this text rather than a time.
var sqliteTimeLayouts = []string{
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02T15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05",
	time.RFC3339Nano,
}

// scanTime turns an aggregate's value into a time: nil is the zero time.
func scanTime(v any) (time.Time, error) {
	switch x := v.(type) {
	case nil:
		return time.Time{}, nil
	case time.Time:
		return x.UTC(), nil
	case []byte:
		return parseSQLiteTime(string(x))
	case string:
		return parseSQLiteTime(x)
	default:
		return time.Time{}, fmt.Errorf("cannot read %T as a time", v)
	}
}

func parseSQLiteTime(s string) (time.Time, error) {
	s = strings.TrimSuffix(s, "Z")
	for _, l := range sqliteTimeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("cannot read %q as a time", s)
}

// Counts for the metrics endpoint and the alert rules.

// CountVMsByState counts the VMs in each state but deleted (of every host:
// queued VMs have none yet).
func (s *Store) CountVMsByState(ctx context.Context) (map[string]int64, error) {
	var rows []struct {
		State string
		N     int64
	}
	err := s.db.WithContext(ctx).Model(&VM{}).Select("state, COUNT(*) AS n").Where(liveVM).Group("state").Scan(&rows).Error
	if err != nil {
		return nil, wrap(err, nil, "count vms by state")
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.State] = r.N
	}
	return out, nil
}

// CountLiveAllocations counts a host's live allocations ("": every host's)
// by kind.
func (s *Store) CountLiveAllocations(ctx context.Context, host string) (map[gpu.Kind]int64, error) {
	q := s.db.WithContext(ctx).Model(&Allocation{}).Select("kind, COUNT(*) AS n").Where(liveAllocation)
	if host != "" {
		q = q.Where("host = ?", host)
	}
	var rows []struct {
		Kind gpu.Kind
		N    int64
	}
	if err := q.Group("kind").Scan(&rows).Error; err != nil {
		return nil, wrap(err, nil, "count live allocations of host %q", host)
	}
	out := make(map[gpu.Kind]int64, len(rows))
	for _, r := range rows {
		out[r.Kind] = r.N
	}
	return out, nil
}

// QueueStats is the queue as the monitor sees it.
type QueueStats struct {
	// Length counts the queued VMs, those that may not start yet too.
	Length int
	// Waiting counts those that may start now (no start time, or one
	// past), and OldestSince is since when the longest-waiting of them
	// waits: its creation, or its start time when that came later. Zero
	// when none waits.
	Waiting     int
	OldestSince time.Time
}

// GetQueueStats reads the queue at now (every host's: a queued VM has no
// host yet). Four aggregates over the covering index vms_queued_start: the
// count of the queued VMs and of those whose start time has not come steps
// through the index, and the oldest wait is an index search, so that a
// scrape of /metrics costs little more with ten thousand queued than with
// ten, and never loads them.
func (s *Store) GetQueueStats(ctx context.Context, now time.Time) (QueueStats, error) {
	now = now.UTC()
	var length, later int64
	var oldestPlain, oldestTimed any
	row := s.db.WithContext(ctx).Raw(`SELECT
	(SELECT COUNT(*) FROM vms WHERE `+queuedVM+`),
	(SELECT COUNT(*) FROM vms WHERE `+queuedVM+` AND start_at > ?),
	(SELECT MIN(created_at) FROM vms WHERE `+queuedVM+` AND start_at IS NULL),
	(SELECT MIN(CASE WHEN start_at > created_at THEN start_at ELSE created_at END) FROM vms WHERE `+queuedVM+` AND start_at <= ?)`,
		now, now).Row()
	if err := row.Scan(&length, &later, &oldestPlain, &oldestTimed); err != nil {
		return QueueStats{}, wrap(err, nil, "read the queue")
	}
	q := QueueStats{Length: int(length), Waiting: int(length - later)}
	for _, v := range []any{oldestPlain, oldestTimed} {
		t, err := scanTime(v)
		if err != nil {
			return QueueStats{}, wrap(err, nil, "read the queue's oldest wait")
		}
		if !t.IsZero() && (q.OldestSince.IsZero() || t.Before(q.OldestSince)) {
			q.OldestSince = t
		}
	}
	return q, nil
}

// ListFinishedCreates lists the create operations of a host's VMs ("":
// every host's) that finished done after `after`, by finish time: each
// took FinishedAt − CreatedAt from request to running VM.
func (s *Store) ListFinishedCreates(ctx context.Context, host string, after time.Time) ([]Operation, error) {
	var out []Operation
	err := finishedCreatesQuery(s.db.WithContext(ctx), host, after).Find(&out).Error
	if err != nil {
		return nil, wrap(err, nil, "list create operations finished after %s", after.UTC().Format(time.RFC3339))
	}
	return out, nil
}

// finishedCreate is the predicate of the partial index
// operations_creates_done, written out (not bound): a cached statement's
// generic plan cannot prove that parameters match an index's predicate.
const finishedCreate = "operations.kind = '" + OpCreate + "' AND operations.state = '" + OpDone + "'"

// finishedCreatesQuery is ListFinishedCreates's query: through the partial
// index operations_creates_done (schema 18), it reads only the creates
// finished after `after`, not every operation ever recorded, and then
// their VMs by key.
func finishedCreatesQuery(db *gorm.DB, host string, after time.Time) *gorm.DB {
	q := db.Model(&Operation{}).Select("operations.*").
		Where(finishedCreate+" AND operations.finished_at > ?", after.UTC())
	if host != "" {
		q = q.Joins("JOIN vms ON vms.id = operations.vm_id").Where("vms.host = ?", host)
	}
	return q.Order("operations.finished_at, operations.id")
}

// VGPULicenses is, per device (gpu_samples.instance) of a VM, the licence
// state of its newest raw sample taken at or after since that knows one:
// what GET /v1/vms/{id} says of the VM's vGPUs. Devices with none are
// left out.
func (s *Store) VGPULicenses(ctx context.Context, vmID string, since time.Time) (map[string]string, error) {
	var rows []GPUSample
	err := s.db.WithContext(ctx).Select("instance, license, taken_at").
		Where("vm_id = ? AND resolution = 0 AND taken_at >= ? AND instance <> '' AND license <> ''", vmID, since.UTC()).
		Order("taken_at").Find(&rows).Error
	if err != nil {
		return nil, wrap(err, nil, "read the licence state of VM %s's vGPUs", vmID)
	}
	out := map[string]string{}
	for _, r := range rows {
		out[r.Instance] = r.License // by time: the newest wins
	}
	return out, nil
}
