package portal_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/task"
)

// taskConfig is the browser tests' profiles with "train", a Linux profile
// with a MIG slice and a cloud-init seed: the only one a task may run in
// (the others have no seed for the task's runner, or no GPU).
const taskConfig = profiles + `
template "keys" {
  content = "#cloud-config\nuser: ${user}\n"
}
profile "train" {
  description = "training runs"
  vcpus  = 2
  memory = "8GiB"
  boot { kernel = "/k" }
  cloud_init { template = "keys" }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
    model   = "H100"
  }
  class = "batch"
  lease {
    default = "2h"
    max     = "12h"
  }
}
`

// taskEnv starts a server on taskConfig whose worker leaves VMs queued
// (no supervisor runs: the tests move the tasks through the store), and
// the directory of the tasks' output.
func taskEnv(t *testing.T) (*clienttest.Env, string) {
	t.Helper()
	logs := t.TempDir()
	env := clienttest.New(t, clienttest.Options{Profiles: taskConfig, TaskLogs: logs})
	env.Worker.Pause()
	upHost(t, env.Store)
	return env, logs
}

// addTask writes a task of ann's, with its VM, as POST /v1/tasks does.
func addTask(t *testing.T, st *store.Store, id string, command []string, at time.Time) *store.Task {
	t.Helper()
	b := `["` + strings.Join(command, `","`) + `"]`
	tk := &store.Task{ID: id, Owner: "ann", Profile: "train", Command: b, TimeLimitS: 3600, KillWaitS: 30}
	vm := &store.VM{Name: "task-" + id[len(id)-8:], Owner: "ann", Profile: "train", Hours: 1}
	if _, err := st.CreateVM(context.Background(), vm, store.CreateVMOptions{RequestedBy: "ann", Task: tk}); err != nil {
		t.Fatal(err)
	}
	return tk
}

func annTasks(t *testing.T, st *store.Store) []store.Task {
	t.Helper()
	ts, err := st.ListTasks(context.Background(), "ann", 0)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func appendLog(t *testing.T, dir, id, text string) {
	t.Helper()
	f, err := os.OpenFile(task.LogPath(dir, id), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// Tasks, in English: the catalogue's "Run a task" opens the form with the
// profile chosen (only the profiles a task can run in are offered); a bad
// time limit is refused beside its field in the server's words; a task
// submitted shows pending with its reason, then running with its output
// followed live as it is written; it is cancelled (confirmed), and when it
// has ended the page says so, its end as "code:signal". The list is paged,
// newest first; the details open with the keyboard.
func TestTasksPageInChromium(t *testing.T) {
	needBrowser(t)
	env, logs := taskEnv(t)
	ctx := context.Background()
	// 21 older tasks: the list's first page is 20.
	for i := range 21 {
		addTask(t, env.Store, fmt.Sprintf("00000000-0000-7000-8000-0000000000%02d", i), []string{"echo", fmt.Sprintf("old-%02d", i)}, time.Now())
	}
	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)

	// From the catalogue: train's card has "Run a task", the seat's not.
	var links []string
	b.eval(`[...document.querySelectorAll('a.run-task')].map((a) => a.closest('li').getAttribute('aria-labelledby') + ' ' + a.getAttribute('href'))`, &links)
	if len(links) != 1 || links[0] != "profile-train /tasks?profile=train" {
		t.Errorf("Run a task links: %q", links)
	}
	b.click(`li[aria-labelledby="profile-train"] a.run-task`)
	b.waitFor("the tasks page", `document.querySelector('#task-profile') && document.querySelectorAll('#tasks li').length > 0`)
	var opts []string
	b.eval(`[...document.querySelectorAll('#task-profile option')].map((o) => o.value)`, &opts)
	var chosen string
	b.eval(`document.querySelector('#task-profile').value`, &chosen)
	if len(opts) != 1 || opts[0] != "train" || chosen != "train" {
		t.Errorf("profiles offered %q, chosen %q; want train only, chosen", opts, chosen)
	}
	if got := b.text(`nav a[aria-current=page]`); got != "Tasks" {
		t.Errorf("the navigation's current page: %q", got)
	}
	var n int
	b.eval(`document.querySelectorAll('#tasks ul.items > li').length`, &n)
	if n != 20 {
		t.Errorf("the first page has %d tasks, want 20", n)
	}
	b.click(`#more-tasks`)
	b.waitFor("the older tasks", `document.querySelectorAll('#tasks ul.items > li').length === 21 && !document.querySelector('#more-tasks')`)
	b.check("tasks")

	// Refused beside the field: a time limit that is not a duration (the
	// server's words), a command whose quote is not closed (the page's).
	b.fill(`#task-command`, `python train.py --name "run 1`)
	b.fill(`#task-time`, "1h")
	b.click(`#submit-task button[type=submit]`)
	b.waitFor("the quote refused", `document.querySelector('#task-command-error')?.textContent.includes('not closed')`)
	b.fill(`#task-command`, `python train.py --name "run 1" --epochs 30`)
	b.fill(`#task-time`, "soon")
	b.click(`#submit-task button[type=submit]`)
	b.waitFor("the time limit refused", `document.querySelector('#task-time-error') && !document.querySelector('#task-command-error')`)
	if got, want := b.text(`#task-time-error`), `"soon" is not a duration such as "4h"`; !strings.Contains(got, want) {
		t.Errorf("the time limit's refusal: %q, want %q", got, want)
	}
	var described string
	b.eval(`document.querySelector('#task-time').getAttribute('aria-describedby') + ' ' + document.querySelector('#task-time').getAttribute('aria-invalid')`, &described)
	if described != "task-time-error task-time-hint true" {
		t.Errorf("the time limit field after its refusal: %q", described)
	}
	if got := len(annTasks(t, env.Store)); got != 21 {
		t.Fatalf("a refused task was made: %d tasks", got)
	}
	b.check("tasks-refused")

	// Submitted: pending, its details open.
	b.fill(`#task-time`, "90m")
	b.click(`#submit-task button[type=submit]`)
	b.waitFor("the task submitted", `document.querySelector('main [role=status]').textContent.includes('submitted')`)
	ts := annTasks(t, env.Store)
	if len(ts) != 22 || ts[0].Command != `["python","train.py","--name","run 1","--epochs","30"]` || ts[0].TimeLimitS != 5400 || ts[0].Profile != "train" {
		t.Fatalf("the task made: %d tasks, newest %+v", len(ts), ts[0])
	}
	tk := ts[0]
	sel := "#task-" + tk.ID
	b.waitFor("its details", `document.querySelector('`+sel+`-details')`)
	var first string
	b.eval(`document.querySelector('#tasks ul.items > li').id`, &first)
	if first != "task-"+tk.ID {
		t.Errorf("the newest task is not first: %s", first)
	}
	if got := b.text(sel + ` h3`); got != `python train.py --name 'run 1' --epochs 30` {
		t.Errorf("what it runs: %q", got)
	}
	if err := env.Store.UpdateTask(ctx, tk.ID, nil, store.TaskUpdate{State: api.TaskPending, Reason: "no free capacity (test)"}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("its reason", `document.querySelector('`+sel+` .reason')?.textContent === 'no free capacity (test)'`)
	if got := b.text(sel + `-details-log-state`); !strings.Contains(got, "has not started yet") {
		t.Errorf("a pending task's output: %q", got)
	}

	// Running: its output as it is written.
	appendLog(t, logs, tk.ID, "epoch 1 loss 0.93\n")
	now := time.Now()
	if err := env.Store.UpdateTask(ctx, tk.ID, nil, store.TaskUpdate{State: api.TaskRunning, StartedAt: &now}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("running", `document.querySelector('`+sel+`[data-state="running"]')`)
	b.waitFor("the first line", `document.querySelector('`+sel+`-details-log')?.textContent.includes('epoch 1 loss 0.93')`)
	appendLog(t, logs, tk.ID, "epoch 2 loss 0.71\n")
	b.waitFor("the next line, followed", `document.querySelector('`+sel+`-details-log')?.textContent === 'epoch 1 loss 0.93\nepoch 2 loss 0.71\n'`)
	if got := b.text(sel + `-details-log-state`); !strings.Contains(got, "Following") {
		t.Errorf("while running: %q", got)
	}
	// The address names the task open: loaded again, the page opens it
	// and reads its output again.
	var loc string
	b.run(chromedp.Location(&loc))
	if want := env.URL + "/tasks?task=" + tk.ID; loc != want {
		t.Errorf("at %s, want %s", loc, want)
	}
	b.run(chromedp.Navigate(loc))
	b.waitFor("the output after a reload", `document.querySelector('`+sel+`-details-log')?.textContent === 'epoch 1 loss 0.93\nepoch 2 loss 0.71\n'`)
	b.check("tasks-running")

	// The details close and open again with the keyboard.
	toggle := sel + ` .task-head button`
	b.run(chromedp.Focus(toggle, chromedp.ByQuery), chromedp.KeyEvent(kb.Enter))
	b.waitFor("closed", `!document.querySelector('`+sel+`-details')`)
	b.run(chromedp.Focus(toggle, chromedp.ByQuery), chromedp.KeyEvent(kb.Enter))
	b.waitFor("open again, its output read again", `document.querySelector('`+sel+`-details-log')?.textContent.includes('epoch 2')`)

	// Cancel: asked first; Escape leaves it; yes asks for it.
	b.click(sel + `-details-cancel`)
	b.run(chromedp.WaitVisible(`dialog.confirm`, chromedp.ByQuery))
	if got := b.text(`#confirm-text`); !strings.Contains(got, "Cancel task "+strings.ReplaceAll(tk.ID, "-", "")[24:]) {
		t.Errorf("the cancel's question: %q", got)
	}
	b.run(chromedp.KeyEvent(kb.Escape), chromedp.WaitNotPresent(`dialog.confirm`, chromedp.ByQuery))
	if got, _ := env.Store.GetTask(ctx, tk.ID); got.CancelAt != nil {
		t.Fatal("Escape cancelled the task")
	}
	b.click(sel + `-details-cancel`)
	b.run(chromedp.WaitVisible(`dialog.confirm`, chromedp.ByQuery))
	b.click(`#confirm-yes`)
	b.waitFor("the cancel asked", `document.querySelector('main [role=status]').textContent.includes('Cancelling task')`)
	if got, _ := env.Store.GetTask(ctx, tk.ID); got.CancelAt == nil {
		t.Fatal("no cancel recorded")
	}
	// The supervisor's part: SIGTERM ends the command, the task is
	// cancelled; the page stops following and says how it ended.
	appendLog(t, logs, tk.ID, "terminated\n")
	code, sig := 0, 15
	if err := env.Store.UpdateTask(ctx, tk.ID, nil, store.TaskUpdate{State: api.TaskCancelled, ExitCode: &code, Signal: &sig}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("cancelled", `document.querySelector('`+sel+`[data-state="cancelled"]')`)
	b.waitFor("the end of the output", `document.querySelector('`+sel+`-details-log-state')?.textContent.includes('has ended')`)
	if got := b.text(sel + `-details-log`); got != "epoch 1 loss 0.93\nepoch 2 loss 0.71\nterminated\n" {
		t.Errorf("the whole output: %q", got)
	}
	for s, want := range map[string]string{sel + ` .exit`: "0:15", sel + ` .state`: "cancelled"} {
		if got := b.text(s); got != want {
			t.Errorf("%s: %q, want %q", s, got, want)
		}
	}
	var cancelShown bool
	b.eval(`!!document.querySelector('`+sel+`-details-cancel')`, &cancelShown)
	if cancelShown {
		t.Error("an ended task can still be cancelled")
	}
	b.check("tasks-ended")
	b.phoneFit("tasks-ended")

	// My usage: the task's VM held a seventh of a GPU for 42 minutes (0.1
	// GPU-hours), counted as a VM's, and said as tasks'.
	end := time.Now()
	if err := env.Store.InsertUsageRecord(ctx, &store.UsageRecord{VMID: tk.VMID, User: "ann", Host: "gpu-01", GPUAddress: "0000:41:00.0",
		Kind: "mig", Share: 1.0 / 7, StartedAt: end.Add(-42 * time.Minute), EndedAt: &end}); err != nil {
		t.Fatal(err)
	}
	b.run(chromedp.Navigate(env.URL + "/usage"))
	b.waitFor("the usage page", `document.querySelector('#usage-week-text')`)
	for _, s := range []string{`#usage-week`, `#usage-month`} {
		if got := b.text(s); !strings.Contains(got, "0.1 GPU-hours") || !strings.Contains(got, "of which tasks: 0.1 GPU-hours") {
			t.Errorf("%s: %q, want 0.1 GPU-hours, all of them tasks'", s, got)
		}
	}
	b.check("usage-tasks")
}

// Tasks in Chinese, opened at one task (?task=ID) that failed with exit 3:
// its state, end and output; nothing on the page is in English but what a
// person typed or a program wrote (the command, the output, the IDs).
func TestTasksPageInChinese(t *testing.T) {
	needBrowser(t)
	env, logs := taskEnv(t)
	ctx := context.Background()
	tk := addTask(t, env.Store, "01900000-0000-7000-8000-00000000abcd", []string{"python", "train.py"}, time.Now())
	appendLog(t, logs, tk.ID, "Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n")
	start := time.Now().Add(-time.Hour)
	code, sig := 3, 0
	if err := env.Store.UpdateTask(ctx, tk.ID, nil, store.TaskUpdate{State: api.TaskRunning, StartedAt: &start}); err != nil {
		t.Fatal(err)
	}
	if err := env.Store.UpdateTask(ctx, tk.ID, nil, store.TaskUpdate{State: api.TaskFailed, ExitCode: &code, Signal: &sig}); err != nil {
		t.Fatal(err)
	}
	pending := addTask(t, env.Store, "01900000-0000-7000-8000-00000000ef01", []string{"true"}, time.Now())
	if err := env.Store.UpdateTask(ctx, pending.ID, nil, store.TaskUpdate{State: api.TaskPending, Reason: "its VM was deleted before the command ended"}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, env.URL, false)
	b.run(chromedp.Navigate(env.URL+"/login"), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	b.eval(`document.cookie = 'gpuvm_lang=zh-CN; path=/'`, nil)
	b.signIn(env.UserToken)
	sel := "#task-" + tk.ID
	b.run(chromedp.Navigate(env.URL+"/tasks?task="+tk.ID), chromedp.WaitVisible(sel+`-details`, chromedp.ByQuery))
	b.waitFor("the output, read to its end", `document.querySelector('`+sel+`-details-log-state')?.textContent.includes('任务已结束')`)
	for s, want := range map[string]string{
		sel + ` .state`:                    "失败",
		sel + ` .exit`:                     "3:0",
		sel + `-details-log`:               "RuntimeError: CUDA out of memory",
		"#task-" + pending.ID + ` .reason`: "命令结束前其虚拟机已被删除", // the server says the reason in the page's language
		`#task-time-hint`:                  "此配置最长 12 小时",
		`nav a[aria-current=page]`:         "任务",
	} {
		if got := b.text(s); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", s, got, want)
		}
	}
	b.check("tasks-zh")
	b.phoneFit("tasks-zh")
	// What a person typed and what a program wrote are as they are: the
	// command, the IDs and the output (code and pre) are left out: hidden
	// by a style sheet of the document's, which the page's refresh of a live
	// task (every 3 s) does not undo, as it did a removal of the elements
	// (a constructed sheet: the portal's CSP refuses inline style). The
	// spaces the hidden code leaves are not read as spaces after Chinese
	// punctuation (english, not chinese).
	b.eval(`(() => { const s = new CSSStyleSheet(); s.replaceSync('code, pre { display: none !important; }'); document.adoptedStyleSheets = [...document.adoptedStyleSheets, s]; })()`, nil)
	if bad := b.english("tasks"); len(bad) > 0 {
		t.Errorf("English on the Chinese page:\n%s", strings.Join(bad, "\n"))
	}
}

// /tasks?profile=NAME naming a profile the person cannot run a task in (one
// without a seed or a GPU, or none at all) says so beside the form, in
// English and in Chinese (its sentences joined as Chinese joins them, no
// space after "。"), and which profile is chosen instead; one that can is
// chosen without a word. The page with the notice is checked as every
// page is, at a phone's width too.
func TestTasksPageRefusedProfile(t *testing.T) {
	needBrowser(t)
	env, _ := taskEnv(t)
	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)
	open := func(profile string) {
		t.Helper()
		b.run(chromedp.Navigate(env.URL+"/tasks?profile="+profile), chromedp.WaitVisible(`#task-profile`, chromedp.ByQuery))
	}
	for _, name := range []string{"seat", "nope"} {
		open(name)
		var chosen string
		b.eval(`document.querySelector('#task-profile').value`, &chosen)
		got := b.text(`#submit-task #task-profile-refused`)
		if want := "You cannot run a task in “" + name + "”"; !strings.Contains(got, want) || !strings.Contains(got, "train is chosen instead.") || chosen != "train" {
			t.Errorf("?profile=%s: notice %q, chosen %q; want %q, train chosen", name, got, chosen, want)
		}
	}
	b.check("tasks-profile-refused")
	b.phoneFit("tasks-profile-refused")
	open("train")
	var notices int
	b.eval(`document.querySelectorAll('#task-profile-refused').length`, &notices)
	if notices != 0 {
		t.Errorf("?profile=train: %d refusals shown", notices)
	}
	b.eval(`document.cookie = 'gpuvm_lang=zh-CN; path=/'`, nil)
	open("seat")
	if got := b.text(`#task-profile-refused`); !strings.Contains(got, "你不能在“seat”中运行任务") || !strings.Contains(got, "之中。已改为选择 train。") {
		t.Errorf("in Chinese: %q", got)
	}
	b.check("tasks-profile-refused-zh")
	b.phoneFit("tasks-profile-refused-zh")
}
