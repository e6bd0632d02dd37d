package policy

import (
	"math"
	"sort"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// Usage is each user's past GPU use, decayed with a half-life as Slurm's
// PriorityDecayHalfLife does: GPU-hours weighted by the share of the GPU held
// (a whole GPU for an hour is 1, a 1g.10gb slice of an H100 for an hour 1/7).
// It holds ended stretches of use; a scheduling session adds what running
// VMs have used so far. The zero Usage is not usable: use NewUsage.
type Usage struct {
	halfLife time.Duration
	users    map[string]decayed
}

type decayed struct {
	v  float64
	at time.Time
}

// NewUsage makes an empty ledger with a half-life (config.DefaultHalfLife
// when 0).
func NewUsage(halfLife time.Duration) *Usage {
	if halfLife <= 0 {
		halfLife = config.DefaultHalfLife
	}
	return &Usage{halfLife: halfLife, users: map[string]decayed{}}
}

// HalfLife is the ledger's half-life.
func (u *Usage) HalfLife() time.Duration { return u.halfLife }

func (u *Usage) decay(d time.Duration) float64 {
	return math.Exp2(-d.Hours() / u.halfLife.Hours())
}

// At returns user's decayed usage at t.
func (u *Usage) At(user string, t time.Time) float64 {
	x, ok := u.users[user]
	if !ok {
		return 0
	}
	if t.Before(x.at) {
		return x.v
	}
	return x.v * u.decay(t.Sub(x.at))
}

// Add adds gpuHours of use at t.
func (u *Usage) Add(user string, gpuHours float64, t time.Time) {
	cur := u.At(user, t)
	at := t
	if x, ok := u.users[user]; ok && t.Before(x.at) {
		// Use from the past: decay it to the ledger's time.
		cur = x.v
		at = x.at
		gpuHours *= u.decay(x.at.Sub(t))
	}
	u.users[user] = decayed{v: cur + gpuHours, at: at}
}

// Charge adds a stretch of use at a constant share from from to to,
// integrating the decay over the stretch.
func (u *Usage) Charge(user string, share float64, from, to time.Time) {
	if !to.After(from) || share <= 0 {
		return
	}
	h := u.halfLife.Hours()
	d := to.Sub(from).Hours()
	// ∫ share · 2^(-(to-t)/h) dt over [from, to], in hours.
	v := share * h / math.Ln2 * (1 - math.Exp2(-d/h))
	u.Add(user, v, to)
}

// Users lists the users with usage, sorted.
func (u *Usage) Users() []string {
	out := make([]string, 0, len(u.users))
	for k := range u.users {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Weights of the fairshare order (Slurm's multifactor priority, with the
// fair-share factor dominant and age to keep heavy users from waiting
// forever).
const (
	FairshareWeight = 1000
	AgeWeight       = 100
	MaxAge          = 24 * time.Hour
)

// orderQueue sorts requests by order at now. Every order ends in submission
// time and ID, so it is total.
func orderQueue(order string, q []scheduler.Request, now time.Time, factor func(user string) float64) []scheduler.Request {
	out := append([]scheduler.Request(nil), q...)
	base := func(a, b *scheduler.Request) bool {
		if !a.Submitted.Equal(b.Submitted) {
			return a.Submitted.Before(b.Submitted)
		}
		return a.ID < b.ID
	}
	switch order {
	case config.OrderPriority:
		sort.SliceStable(out, func(i, j int) bool {
			if out[i].Priority != out[j].Priority {
				return out[i].Priority > out[j].Priority
			}
			return base(&out[i], &out[j])
		})
	case config.OrderSJF:
		sort.SliceStable(out, func(i, j int) bool {
			if out[i].Lease != out[j].Lease {
				return out[i].Lease < out[j].Lease
			}
			return base(&out[i], &out[j])
		})
	case config.OrderFairshare:
		keys := make([]float64, len(out))
		idx := make([]int, len(out))
		for i := range out {
			idx[i] = i
			age := now.Sub(out[i].Submitted)
			if age < 0 {
				age = 0
			}
			if age > MaxAge {
				age = MaxAge
			}
			k := FairshareWeight*factor(out[i].User) + AgeWeight*float64(age)/float64(MaxAge)
			keys[i] = math.Round(k*1e6) / 1e6 // stable against float noise
		}
		sort.SliceStable(idx, func(a, b int) bool {
			i, j := idx[a], idx[b]
			if keys[i] != keys[j] {
				return keys[i] > keys[j]
			}
			if out[i].Priority != out[j].Priority {
				return out[i].Priority > out[j].Priority
			}
			return base(&out[i], &out[j])
		})
		sorted := make([]scheduler.Request, len(out))
		for k, i := range idx {
			sorted[k] = out[i]
		}
		out = sorted
	default: // fifo
		sort.SliceStable(out, func(i, j int) bool { return base(&out[i], &out[j]) })
	}
	return out
}

// fairshareFactors computes Slurm's classic fair-share factor for every
// user: F = 2^(−U/S), U the user's share of all decayed usage, S the user's
// share of the cluster (equal among the users that have usage or ask now).
// F is 1 for a user with no usage and 0.5 for one who used exactly their
// share.
func fairshareFactors(usage map[string]float64, users []string) map[string]float64 {
	total := 0.0
	for _, v := range usage {
		total += v
	}
	n := len(users)
	f := make(map[string]float64, n)
	for _, u := range users {
		if total <= 0 || n == 0 {
			f[u] = 1
			continue
		}
		f[u] = math.Exp2(-(usage[u] / total) * float64(n))
	}
	return f
}
