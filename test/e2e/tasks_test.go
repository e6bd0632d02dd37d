package e2e

import (
	"bufio"
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
// asks: `gpuvm task submit` of a command that prints three lines a second
// apart and exits 3; `gpuvm task logs -f` shows the lines as they come,
// before the task ends; it ends failed with exit 3 (signal 0); its VM is
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
		"sh", "-c", "for i in 1 2 3; do echo line $i; sleep 1; done; exit 3"))
	task, err := ann.cl.GetTask(w.ctx(30*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	vms.add(task.VMID)
	w.recordConsole(hv, task.VMID)

	// The lines as `gpuvm task logs -f` prints them, each with when; and
	// when the API first says the task has ended.
	logs := exec.Command(ann.cli.bin, "task", "logs", "-f", id)
	logs.Env = []string{"HOME=" + ann.cli.home, "XDG_CONFIG_HOME=" + filepath.Join(ann.cli.home, ".config"), "PATH=/usr/bin:/bin"}
	stdout, err := logs.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	logs.Stderr = &stderr
	if err := logs.Start(); err != nil {
		t.Fatal(err)
	}
	type line struct {
		text string
		at   time.Time
	}
	var lines []line
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines = append(lines, line{sc.Text(), time.Now()})
		}
	}()
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
	waited := make(chan error, 1)
	go func() { <-read; waited <- logs.Wait() }()
	select {
	case <-waited:
	case <-time.After(5 * time.Minute):
		_ = logs.Process.Kill()
		t.Fatalf("gpuvm task logs -f did not end in 5 minutes; it printed %v; stderr %s", lines, stderr.String())
	}
	// The poller sees the end on its own (logs -f may end a poll before
	// it); only if it never does is it stopped, and the check below fails.
	select {
	case <-polled:
	case <-time.After(30 * time.Second):
		close(stopPoll)
		<-polled
	}
	if code := logs.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), "failed: the command exited 3") {
		t.Errorf("gpuvm task logs -f: exit %d, stderr %q; want 1 and the task failed with exit 3", code, stderr.String())
	}
	var texts []string
	for _, l := range lines {
		texts = append(texts, l.text)
	}
	if got := strings.Join(texts, "|"); got != "line 1|line 2|line 3" {
		t.Fatalf("gpuvm task logs -f printed %q, want the three lines", got)
	}
	mu.Lock()
	ended := endedAt
	mu.Unlock()
	if ended.IsZero() || !lines[0].at.Before(ended) {
		t.Errorf("line 1 came at %v, the task was seen ended at %v: the output must come as it is made", lines[0].at, ended)
	}

	final, err := ann.cl.GetTask(w.ctx(30*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	if final.State != api.TaskFailed || final.ExitCode == nil || *final.ExitCode != 3 || final.Signal == nil || *final.Signal != 0 ||
		final.LogBytes != int64(len("line 1\nline 2\nline 3\n")) {
		t.Errorf("the task ended %+v; want failed, exit 3, signal 0, 21 bytes of output", final)
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
	t.Logf("task %s: line 1 %v after the start, ended %v after it, the GPU free %v after the end", id,
		lines[0].at.Sub(begin).Round(100*time.Millisecond), ended.Sub(begin).Round(100*time.Millisecond), freeAfter.Round(100*time.Millisecond))
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
