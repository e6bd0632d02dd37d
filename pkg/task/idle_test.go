package task

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// countingStore counts the supervisor's rounds (each reads the round's
// tasks once).
type countingStore struct {
	*store.Store
	rounds atomic.Int32
}

func (c *countingStore) ListRoundTasks(ctx context.Context) ([]store.Task, error) {
	c.rounds.Add(1)
	return c.Store.ListRoundTasks(ctx)
}

// While no task lives the supervisor rounds every IdleInterval, not every
// Interval; Wake (a task submitted) starts a round at once, and with a
// live task it rounds every Interval again.
func TestSupervisorIdles(t *testing.T) {
	st := &countingStore{Store: storetest.New(t, storetest.Quiet)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sup, err := New(Config{Store: st, LogDir: filepath.Join(t.TempDir(), "tasks"), Interval: 10 * time.Millisecond, IdleInterval: time.Hour,
		Channel: func(context.Context, string) (string, error) { return "", nil }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { sup.Run(ctx); close(done) }()
	waitRounds := func(n int32, within time.Duration) bool {
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			if st.rounds.Load() >= n {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}
	if !waitRounds(1, 5*time.Second) {
		t.Fatal("no first round")
	}
	time.Sleep(200 * time.Millisecond) // twenty intervals
	if n := st.rounds.Load(); n != 1 {
		t.Fatalf("%d rounds without a task in 200 ms, want 1 (the next after IdleInterval)", n)
	}
	// A task: woken, the supervisor rounds at once, then every Interval.
	if err := st.CreateUser(ctx, &store.User{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	tk := &store.Task{ID: "0193a5c0-idle", Owner: "alice", Profile: "tiny", Command: `["true"]`, TimeLimitS: 60, KillWaitS: 30}
	vm := &store.VM{Name: "task-0193a5c0", Owner: "alice", Profile: "tiny", Spec: `{"hours":1,"task":"0193a5c0-idle"}`, Hours: 1}
	if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "alice", Task: tk}); err != nil {
		t.Fatal(err)
	}
	sup.Wake()
	if !waitRounds(2, 5*time.Second) {
		t.Fatal("Wake started no round")
	}
	if !waitRounds(6, 5*time.Second) {
		t.Fatalf("with a live task: %d rounds, want one every Interval", st.rounds.Load())
	}
	cancel()
	<-done
}
