package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Read-only queries of the usage ledger (usage_records) and of the GPU
// samples (gpu_samples) that accounting and reports need. They never write.

// UsageQuery selects usage over the time range [From, To).
type UsageQuery struct {
	From, To time.Time
	// User keeps one user's records (or samples) only; empty: everyone's.
	User string
}

func (q UsageQuery) check(what string) (UsageQuery, error) {
	q.From, q.To = q.From.UTC(), q.To.UTC()
	if !q.To.After(q.From) {
		return q, fmt.Errorf("%s: %w: the time range [%s, %s) is empty", what, ErrInvalid,
			q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	return q, nil
}

// UsageSpan is the part of a usage record inside a query's range: From and
// To are the record's start and end clipped to the range, a record still
// open ending now (clipped too). VMName and VMProfile are the VM's (the
// profile it was asked for, not the device's, which is the record's
// Profile); empty when the VM row is gone.
type UsageSpan struct {
	Record            UsageRecord
	VMName, VMProfile string
	From, To          time.Time
	Open              bool
	// Task: the VM was made for a task (a row of tasks names it).
	Task bool
}

// GPUSeconds is the span's GPU-seconds: its share times its seconds.
func (u UsageSpan) GPUSeconds() float64 { return gpuSeconds(u.Record.Share, u.From, u.To) }

// ListUsageSpans lists the usage records that overlap [From, To), clipped
// to it, with their VM's name and profile and whether the VM ran a task,
// by record ID. Open records count
// up to now; a span that is empty once clipped (a record opened after now,
// by a clock running behind) is left out. Rows are scanned by hand: a
// report reads thousands, and reflection would cost more than the query.
func (s *Store) ListUsageSpans(ctx context.Context, q UsageQuery) ([]UsageSpan, error) {
	q, err := q.check("list usage")
	if err != nil {
		return nil, err
	}
	now := s.clock().UTC()
	db := s.db.WithContext(ctx).Table("usage_records AS u").
		Select("u.id, u.vm_id, u.user_name, u.group_name, u.host, u.gpu_address, u.kind, u.profile, u.share, u.started_at, u.ended_at, "+
			"u.gpu_seconds, COALESCE(v.name, ''), COALESCE(v.profile, ''), "+
			"CASE WHEN EXISTS (SELECT 1 FROM tasks AS t WHERE t.vm_id = u.vm_id) THEN 1 ELSE 0 END").
		Joins("LEFT JOIN vms AS v ON v.id = u.vm_id").
		Where("u.started_at < ? AND (u.ended_at IS NULL OR u.ended_at > ?)", q.To, q.From)
	if q.User != "" {
		db = db.Where("u.user_name = ?", q.User)
	}
	fail := func(err error) ([]UsageSpan, error) {
		return nil, wrap(err, nil, "list usage from %s to %s", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	rows, err := db.Order("u.id").Rows()
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	var out []UsageSpan
	for rows.Next() {
		var sp UsageSpan
		r := &sp.Record
		var ended sql.NullTime
		var task int
		if err := rows.Scan(&r.ID, &r.VMID, &r.User, &r.Group, &r.Host, &r.GPUAddress, &r.Kind, &r.Profile, &r.Share,
			&r.StartedAt, &ended, &r.GPUSeconds, &sp.VMName, &sp.VMProfile, &task); err != nil {
			return fail(err)
		}
		sp.Task = task == 1
		r.StartedAt = r.StartedAt.UTC()
		end := now
		if ended.Valid {
			e := ended.Time.UTC()
			r.EndedAt, end = &e, e
		}
		sp.Open = r.EndedAt == nil
		sp.From, sp.To = maxTime(r.StartedAt, q.From), minTime(end, q.To)
		if sp.To.After(sp.From) {
			out = append(out, sp)
		}
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return out, nil
}

// Samples are kept raw (resolution 0) for a while, then replaced by
// downsampled rows (resolution > 0, each the mean of SampleCount raw
// samples of a period starting at TakenAt): a moment is never in both, so
// the queries below sum every row in range, a row weighing as many raw
// samples as it stands for. Ratios below 0 (not reported) are left out, as
// are samples mapped to no VM.

// deviceFlag is 1 for a device's row, 0 for a whole GPU's, in both
// databases.
const deviceFlag = "CASE WHEN g.instance <> '' THEN 1 ELSE 0 END"

// sampleResolutions lists the resolutions the samples have (0 for raw
// rows), each found by one step along the (resolution, taken_at) index.
func (s *Store) sampleResolutions(ctx context.Context) ([]int, error) {
	var out []int
	for {
		var next sql.NullInt64
		q := s.db.WithContext(ctx).Model(&GPUSample{}).Select("MIN(resolution)")
		if len(out) > 0 {
			q = q.Where("resolution > ?", out[len(out)-1])
		}
		if err := q.Row().Scan(&next); err != nil {
			return nil, err
		}
		if !next.Valid {
			return out, nil
		}
		out = append(out, int(next.Int64))
	}
}

// sampleScope restricts a query of gpu_samples (aliased g) to the samples
// mapped to a VM in q's range that report the GPU utilisation. The
// resolutions are named so that the database reads the range from the
// (resolution, taken_at) index rather than the whole table; ok is false
// when there are no samples at all.
func (s *Store) sampleScope(ctx context.Context, q UsageQuery) (db *gorm.DB, ok bool, err error) {
	res, err := s.sampleResolutions(ctx)
	if err != nil || len(res) == 0 {
		return nil, false, err
	}
	db = s.db.WithContext(ctx).Table("gpu_samples AS g").
		Where("g.resolution IN ? AND g.taken_at >= ? AND g.taken_at < ? AND g.vm_id <> '' AND g.gpu_util >= 0", res, q.From, q.To)
	if q.User != "" {
		db = db.Where("g.user_name = ?", q.User)
	}
	return db, true, nil
}

// UtilBucket is the GPU utilisation of the samples mapped to a VM on one
// GPU in one bucket of time starting at Start, of the VM's device (Device: a
// vGPU, a MIG instance) or of the whole GPU: Sum is Σ utilisation × raw
// samples, Count the raw samples.
type UtilBucket struct {
	Start      time.Time
	VMID       string
	Host       string
	GPUAddress string
	Device     bool
	Sum        float64
	Count      int64
}

// SampleUtilizationBuckets sums the GPU utilisation of the samples mapped
// to VMs over [From, To) in buckets of the given length (whole seconds,
// aligned to the Unix epoch), per VM, GPU and device or whole GPU (see
// UtilBucket), by start, VM, host, GPU and whole GPU first. A downsampled
// row falls in the bucket of its period's start.
func (s *Store) SampleUtilizationBuckets(ctx context.Context, q UsageQuery, bucket time.Duration) ([]UtilBucket, error) {
	q, err := q.check("sum sample utilisation")
	if err != nil {
		return nil, err
	}
	secs := int64(bucket / time.Second)
	if secs <= 0 || bucket%time.Second != 0 {
		return nil, fmt.Errorf("sum sample utilisation: %w: bucket %s is not a whole number of seconds", ErrInvalid, bucket)
	}
	epoch := "CAST(strftime('%s', g.taken_at) AS INTEGER)"
	if s.driver == DriverPostgres {
		epoch = "CAST(FLOOR(EXTRACT(EPOCH FROM g.taken_at)) AS BIGINT)"
	}
	expr := fmt.Sprintf("(%s / %d)", epoch, secs)
	fail := func(err error) ([]UtilBucket, error) {
		return nil, wrap(err, nil, "sum sample utilisation from %s to %s", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	db, ok, err := s.sampleScope(ctx, q)
	if err != nil || !ok {
		if err != nil {
			return fail(err)
		}
		return nil, nil
	}
	rows, err := db.
		Select(expr + " AS bucket, g.vm_id, g.host, g.gpu_address, " + deviceFlag + " AS device, SUM(g.gpu_util * g.sample_count), SUM(g.sample_count)").
		Group(expr + ", g.vm_id, g.host, g.gpu_address, " + deviceFlag).Order("bucket, g.vm_id, g.host, g.gpu_address, device").Rows()
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	// Scanned by hand (a long range has tens of thousands of rows), with
	// the names of VMs and GPUs shared between rows.
	names := map[string]string{}
	intern := func(b []byte) string {
		if s, ok := names[string(b)]; ok {
			return s
		}
		s := string(b)
		names[s] = s
		return s
	}
	var out []UtilBucket
	var vm, host, gpu []byte
	for rows.Next() {
		var b UtilBucket
		var start, device int64
		if err := rows.Scan(&start, &vm, &host, &gpu, &device, &b.Sum, &b.Count); err != nil {
			return fail(err)
		}
		b.Start = time.Unix(start*secs, 0).UTC()
		b.VMID, b.Host, b.GPUAddress, b.Device = intern(vm), intern(host), intern(gpu), device != 0
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return out, nil
}

// QueueWait is how long a VM waited in the queue: from when it was asked
// for (or its booked start, when later) until it first ran. Ran is nil for
// a VM that has not run: Left is then when it gave up waiting (deleted or
// failed), nil while it still waits.
type QueueWait struct {
	VMID, Name, Owner, Group, Profile string
	State                             string
	Since                             time.Time
	Ran, Left                         *time.Time
}

// ListQueueWaits lists the waits of the VMs asked for in [From, To) (those
// of User only, when set), oldest first. When a VM's state events are gone
// (events are pruned), the start of its first usage record (its GPU claim)
// stands for when it ran.
func (s *Store) ListQueueWaits(ctx context.Context, q UsageQuery) ([]QueueWait, error) {
	q, err := q.check("list queue waits")
	if err != nil {
		return nil, err
	}
	fail := func(err error) ([]QueueWait, error) {
		return nil, wrap(err, nil, "list queue waits from %s to %s", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	db := s.db.WithContext(ctx).Select("id", "name", "owner", "group_name", "profile", "state", "created_at", "start_at").
		Where("created_at >= ? AND created_at < ?", q.From, q.To)
	if q.User != "" {
		db = db.Where("owner = ?", q.User)
	}
	var vms []VM
	if err := db.Order("created_at, id").Find(&vms).Error; err != nil {
		return fail(err)
	}
	out := make([]QueueWait, len(vms))
	index := make(map[string]int, len(vms))
	ids := make([]string, len(vms))
	for i, vm := range vms {
		since := vm.CreatedAt
		if vm.StartAt != nil && vm.StartAt.After(since) {
			since = *vm.StartAt
		}
		out[i] = QueueWait{VMID: vm.ID, Name: vm.Name, Owner: vm.Owner, Group: vm.Group, Profile: vm.Profile,
			State: vm.State, Since: since.UTC()}
		index[vm.ID], ids[i] = i, vm.ID
	}
	const chunk = 500 // bounded IN lists
	for lo := 0; lo < len(ids); lo += chunk {
		part := ids[lo:min(lo+chunk, len(ids))]
		var evs []Event
		err := s.db.WithContext(ctx).Select("id", "vm_id", "created_at", "payload").
			Where("type = 'vm.state' AND vm_id IN ?", part).Order("id").Find(&evs).Error
		if err != nil {
			return fail(err)
		}
		for _, e := range evs {
			w := &out[index[e.VMID]]
			if w.Ran != nil || w.Left != nil {
				continue
			}
			var p struct {
				State string `json:"state"`
			}
			if json.Unmarshal(e.Payload, &p) != nil {
				continue
			}
			t := e.CreatedAt.UTC()
			switch p.State {
			case VMRunning:
				w.Ran = &t
			case VMDeleting, VMDeleted, VMFailed:
				w.Left = &t
			}
		}
		// The earliest usage record of each VM (read whole: an aggregate
		// of a time column comes back from SQLite as text).
		var recs []UsageRecord
		err = s.db.WithContext(ctx).Select("vm_id", "started_at").Where("vm_id IN ?", part).Find(&recs).Error
		if err != nil {
			return fail(err)
		}
		first := map[string]time.Time{}
		for _, r := range recs {
			if f, ok := first[r.VMID]; !ok || r.StartedAt.Before(f) {
				first[r.VMID] = r.StartedAt.UTC()
			}
		}
		for id, t := range first {
			w := &out[index[id]]
			if w.Ran == nil && w.Left == nil {
				w.Ran = &t
			}
		}
	}
	// A VM that ended without an event saying so (events pruned) waited
	// until its last update at most; one still waiting has neither.
	for i := range out {
		w := &out[i]
		if w.Ran == nil && w.Left == nil && w.State != VMQueued && w.State != VMAllocating && w.State != VMCreating {
			var vm VM
			if err := s.db.WithContext(ctx).Select("updated_at").Where("id = ?", w.VMID).Take(&vm).Error; err != nil {
				return fail(err)
			}
			t := vm.UpdatedAt.UTC()
			w.Left = &t
		}
	}
	return out, nil
}
