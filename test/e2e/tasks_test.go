package e2e

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/test/guest"
)

// taskProfiles are netProfiles' tiny-mig without a network: the task's
// runner talks to gpuvmd over the domain's virtio-serial channel only.
// KERNEL, INITRD and CMDLINE are filled in.
const taskProfiles = `
template "tiny-seed" {
  content = <<EOT
#cloud-config
hostname: ${hostname}
users:
  - name: ${user}
EOT
}

profile "tiny-task" {
  vcpus  = 1
  memory = "512MiB"
  boot {
    kernel  = "KERNEL"
    initrd  = "INITRD"
    cmdline = "CMDLINE"
  }
  network { type = "none" }
  cloud_init { template = "tiny-seed" }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }
}
`

// A task in the tiny guest under a real libvirtd and QEMU, as issue #28
// asks: `gpuvm task submit` of a command that prints ten lines a second
// apart and exits 3; `gpuvm task logs -f` shows the lines as they come,
// before the task ends. gpuvmd is SIGKILLed while the command prints and
// started again on the same state: it connects to the runner again, and
// the log has every line exactly once (a second `gpuvm task logs -f`
// prints it whole). The task ends failed with exit 3 (signal 0); its VM is
// deleted and the GPU free in GET /v1/hosts within seconds of the end. One
// guest boot. As root with qemu:///system; not with -short or
// GPUVM_SKIP_SYSTEM_TEST=1.
func TestTaskRunsAndGivesTheGPUBack(t *testing.T) {
	hv := needSystemLibvirt(t)
	begin := time.Now()
	tiny := setUpTinyGuest(t, hv)
	profiles := strings.NewReplacer("KERNEL", tiny.files[tiny.kernel], "INITRD", tiny.files[tiny.initrd],
		"CMDLINE", guest.Cmdline).Replace(taskProfiles)
	w := newWorld(t, worldConfig{preset: "h100x8", uri: systemURI, pool: tiny.pool, profiles: profiles})
	w.start()
	hostBefore, lvBefore := w.simHost(), w.libvirtState(hv)
	freeBefore := w.freeGPUs()
	vms := w.deleteLeftOnFailure()
	ann := w.homePerson("ann")
	w.login(&ann)

	id := strings.TrimSpace(ann.cli.must("task", "submit", "tiny-task", "--time", "10m", "--quiet", "--",
		"sh", "-c", "i=1; while [ $i -le 10 ]; do echo line $i; i=$((i + 1)); sleep 1; done; exit 3"))
	task, err := ann.cl.GetTask(w.ctx(30*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	vms.add(task.VMID)
	w.recordConsole(hv, task.VMID)

	// The lines as `gpuvm task logs -f` prints them, each with when. At
	// line 3 gpuvmd is SIGKILLed (the command prints on) and started again.
	first, firstErr := followLogs(t, ann.cli, id, 3)
	killedAt := time.Now()
	w.kill()
	w.start()
	restarted := time.Since(killedAt)
	cl, err := client.New(w.proc.URL(), ann.token)
	if err != nil {
		t.Fatal(err)
	}
	cl.PollMin, cl.PollMax = 20*time.Millisecond, 250*time.Millisecond
	ann.cl = cl
	if out, errOut, code := ann.cli.run(ann.token, "login", w.proc.URL()); code != 0 {
		t.Fatalf("gpuvm login again: exit %d %s %s", code, out, errOut)
	}
	if len(first) < 3 || first[0].text != "line 1" {
		t.Fatalf("before the kill gpuvm task logs -f printed %v (%s)", first, firstErr)
	}
	if got, err := ann.cl.GetTask(w.ctx(30*time.Second), id); err != nil || api.TaskEnded(got.State) {
		t.Fatalf("the task ended (%+v, %v) before line 3 was printed: the output must come as it is made", got, err)
	}

	// When the API first says the task has ended.
	var endedAt time.Time
	var mu sync.Mutex
	stopPoll := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if got, err := ann.cl.GetTask(w.ctx(10*time.Second), id); err == nil && api.TaskEnded(got.State) {
				mu.Lock()
				endedAt = time.Now()
				mu.Unlock()
				return
			}
		}
	}()
	lines, stderr := followLogs(t, ann.cli, id, 0)
	select {
	case <-polled:
	case <-time.After(30 * time.Second):
		close(stopPoll)
		<-polled
	}
	if !strings.Contains(stderr, "failed: the command exited 3") {
		t.Errorf("gpuvm task logs -f after the restart: stderr %q; want the task failed with exit 3", stderr)
	}
	var texts, want []string
	for i, l := range lines {
		texts = append(texts, l.text)
		want = append(want, fmt.Sprintf("line %d", i+1))
	}
	if got := strings.Join(texts, "|"); len(lines) != 10 || got != strings.Join(want, "|") {
		t.Fatalf("after gpuvmd was killed at line 3 and started again, the log is %q, want lines 1 to 10 once each", got)
	}
	mu.Lock()
	ended := endedAt
	mu.Unlock()
	if ended.IsZero() {
		t.Fatal("the API never said the task ended")
	}

	final, err := ann.cl.GetTask(w.ctx(30*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	if final.State != api.TaskFailed || final.ExitCode == nil || *final.ExitCode != 3 || final.Signal == nil || *final.Signal != 0 ||
		final.LogBytes != int64(9*len("line 1\n")+len("line 10\n")) {
		t.Errorf("the task ended %+v; want failed, exit 3, signal 0, 71 bytes of output", final)
	}
	// Its VM is gone and the GPU free again within seconds.
	w.waitState(task.VMID, client.StateDeleted, 30*time.Second)
	vms.done(task.VMID)
	deadline := time.Now().Add(30 * time.Second)
	for !reflect.DeepEqual(w.freeGPUs(), freeBefore) {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the task ended, GET /v1/hosts says free %+v, want %+v as before it", w.freeGPUs(), freeBefore)
		}
		time.Sleep(200 * time.Millisecond)
	}
	freeAfter := time.Since(ended)
	w.sameHost(hostBefore, w.simHost())
	w.sameLibvirt(lvBefore, w.libvirtState(hv))
	w.noErrors()
	t.Logf("task %s: line 1 %v after the start, gpuvmd back %v after its kill, ended %v after the start, the GPU free %v after the end", id,
		first[0].at.Sub(begin).Round(100*time.Millisecond), restarted.Round(100*time.Millisecond), ended.Sub(begin).Round(100*time.Millisecond),
		freeAfter.Round(100*time.Millisecond))
}

// logLine is a line `gpuvm task logs -f` printed, and when.
type logLine struct {
	text string
	at   time.Time
}

// followLogs runs `gpuvm task logs -f` of task id as cli's person and
// returns the lines it printed and its stderr: until it ends (5 minutes at
// most), or, when stopAt > 0, until it has printed stopAt lines (then it
// is killed).
func followLogs(t *testing.T, cli cliRun, id string, stopAt int) ([]logLine, string) {
	t.Helper()
	logs := exec.Command(cli.bin, "task", "logs", "-f", id)
	logs.Env = []string{"HOME=" + cli.home, "XDG_CONFIG_HOME=" + filepath.Join(cli.home, ".config"), "PATH=/usr/bin:/bin"}
	stdout, err := logs.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	logs.Stderr = &stderr
	if err := logs.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []logLine
	enough := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines = append(lines, logLine{sc.Text(), time.Now()})
			if len(lines) == stopAt {
				close(enough)
			}
		}
	}()
	select {
	case <-read:
	case <-enough:
		_ = logs.Process.Kill()
		<-read
	case <-time.After(5 * time.Minute):
		_ = logs.Process.Kill()
		<-read
		t.Fatalf("gpuvm task logs -f did not end in 5 minutes; it printed %v; stderr %s", lines, stderr.String())
	}
	_ = logs.Wait()
	return lines, stderr.String()
}

// freeGPUs is what GET /v1/hosts says is free, by host.
func (w *world) freeGPUs() map[string]api.Capacity {
	w.t.Helper()
	hosts, err := w.cl.ListHosts(w.ctx(30 * time.Second))
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]api.Capacity{}
	for _, h := range hosts {
		out[h.Name] = h.Free
	}
	return out
}
