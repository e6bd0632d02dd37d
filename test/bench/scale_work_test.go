package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// work is what a gpuvmd's /metrics says of its dispatch rounds and its
// estimates' replays (gpuvm_dispatch_round_seconds,
// gpuvm_estimate_replay_seconds): how many ran and their time, in
// seconds. The idle window prints what ran in it, so that its CPU can be
// read: the tail of the fill (a round ranking the last creates, the replay
// it makes stale) or the cost at rest.
type work struct {
	rounds, replays       float64
	roundSecs, replaySecs float64
	ok                    bool
}

// readWork reads node i's /metrics.
func (r *scaleRun) readWork(i int) work {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", r.procs[i].URL()+"/metrics", nil)
	if err != nil {
		return work{}
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		r.tb.Logf("read %s's metrics: %v", r.names[i], err)
		return work{}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.tb.Logf("read %s's metrics: %s", r.names[i], resp.Status)
		return work{}
	}
	w := work{}
	fields := map[string]*float64{
		"gpuvm_dispatch_round_seconds_count":  &w.rounds,
		"gpuvm_dispatch_round_seconds_sum":    &w.roundSecs,
		"gpuvm_estimate_replay_seconds_count": &w.replays,
		"gpuvm_estimate_replay_seconds_sum":   &w.replaySecs,
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if f := fields[name]; ok && f != nil {
			if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
				*f = v
				found++
			}
		}
	}
	w.ok = found == len(fields) && sc.Err() == nil
	return w
}

// since is what ran between before and w.
func (w work) since(before work) work {
	if !w.ok || !before.ok {
		return work{}
	}
	return work{rounds: w.rounds - before.rounds, replays: w.replays - before.replays,
		roundSecs: w.roundSecs - before.roundSecs, replaySecs: w.replaySecs - before.replaySecs, ok: true}
}

func (w work) String() string {
	if !w.ok {
		return "rounds and replays not known (no gpuvm_dispatch_round_seconds in /metrics)"
	}
	return fmt.Sprintf("%.0f dispatch rounds (%.0f ms), %.0f estimate replays (%.0f ms)",
		w.rounds, w.roundSecs*1000, w.replays, w.replaySecs*1000)
}

// quietFor is how long every node must run no dispatch round and no
// estimate replay before the idle window opens; quietLimit bounds the wait.
const (
	quietFor   = 3 * time.Second
	quietLimit = 30 * time.Second
)

// waitQuiet waits until no node has run a round or a replay for quietFor
// (at most quietLimit): what the fill's last creates asked for (a round
// ranking them, the replay that round made stale) is over, and the idle
// window measures gpuvmd at rest. A round or replay is counted when it
// ends, so one still running after quietFor (a replay of tens of
// thousands on a busy machine) is not seen. It returns how long it waited
// and what ran meanwhile, on all nodes together; ok is false when the
// metrics cannot be read (the window then opens at once) or the nodes
// never went quiet.
func (r *scaleRun) waitQuiet() (time.Duration, work, bool) {
	begin := time.Now()
	first := r.allWork()
	if !first.ok {
		return 0, work{}, false
	}
	last, since := first, time.Now()
	for time.Since(begin) < quietLimit {
		time.Sleep(500 * time.Millisecond)
		w := r.allWork()
		if !w.ok {
			return time.Since(begin), work{}, false
		}
		if w.rounds != last.rounds || w.replays != last.replays {
			last, since = w, time.Now()
			continue
		}
		if time.Since(since) >= quietFor {
			return time.Since(begin), w.since(first), true
		}
	}
	return time.Since(begin), last.since(first), false
}

// allWork is every node's work, added up.
func (r *scaleRun) allWork() work {
	sum := work{ok: true}
	for i := range r.procs {
		w := r.readWork(i)
		if !w.ok {
			return work{}
		}
		sum.rounds += w.rounds
		sum.replays += w.replays
		sum.roundSecs += w.roundSecs
		sum.replaySecs += w.replaySecs
	}
	return sum
}
