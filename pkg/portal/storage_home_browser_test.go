package portal_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// homedProfile is a profile whose VMs mount their owner's home.
const homedProfile = `
profile "homed" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  home   = true
}
`

// Delete my home, from My storage: the card names the node the home
// lives on; the dialog says what is lost, its button stays disabled until
// ann's name is typed, Escape closes it; a running VM that mounts the
// home is named in the server's 409 beside the field; stopped, the home
// is deleted and the page says there is none now. In Chinese too, and at
// a phone's width.
func TestStorageHomeDeleteInChromium(t *testing.T) {
	needBrowser(t)
	root := t.TempDir()
	home := filepath.Join(root, "ann")
	if err := os.MkdirAll(filepath.Join(home, "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "work", "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	env, _ := storageEnv(t, true, storageFacts{homesRoot: root, profiles: homedProfile, datasets: "小组的数据集", course: "课程资料"}, "升级前", "全新安装")
	// The VM stays as written: the worker, unpaused by storageEnv for the
	// snapshots other tests take, would place it between the writes.
	env.Worker.Pause()
	ctx := context.Background()
	host := "test-host"
	work := &store.VM{Name: "train", Owner: "ann", Profile: "homed", Hours: 8}
	if _, err := env.Store.CreateVM(ctx, work, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	finishOps(t, env.Store, work.ID)
	work, err := env.Store.UpdateVMState(ctx, work.ID, work.Version, store.VMUpdate{State: store.VMRunning, Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	// The node ann's home lives on, as a fleet's leader records it.
	if _, err := env.Store.RecordHomeHost(ctx, "ann", "gpu-01"); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)
	b.run(chromedp.Navigate(env.URL+"/storage"), chromedp.WaitVisible(`#home-delete`, chromedp.ByQuery))
	if got, want := b.text(`#home-host`), "It lives on the node gpu-01: your VMs that mount it are placed on that node when it can run them."; got != want {
		t.Errorf("the home's node: %q, want %q", got, want)
	}
	// Checked first with no dialog open: axe-core's negative control, once
	// a page, cannot see through a modal dialog.
	b.check("home")
	// Escape closes the dialog; nothing is deleted.
	b.click(`#home-delete`)
	b.run(chromedp.WaitVisible(`#home-delete-dialog`, chromedp.ByQuery))
	var focused string
	b.eval(`document.activeElement.id`, &focused)
	if focused != "home-confirm" {
		t.Errorf("the dialog opens with %q focused, want the name's field", focused)
	}
	b.run(chromedp.KeyEvent(kb.Escape), chromedp.WaitNotPresent(`#home-delete-dialog`, chromedp.ByQuery))

	b.click(`#home-delete`)
	b.run(chromedp.WaitVisible(`#home-delete-dialog`, chromedp.ByQuery))
	said := b.text(`#home-delete-dialog`)
	for _, want := range []string{"Delete your home?", "Every file and folder in your home is deleted", "in all your VMs",
		"Nothing else is deleted", "your data disks", "Type your user name, ann, to confirm"} {
		if !strings.Contains(said, want) {
			t.Errorf("the dialog does not say %q:\n%s", want, said)
		}
	}
	// A name that does not match keeps the button disabled.
	for _, typed := range []string{"", "an", "Ann", "ann "} {
		b.fill(`#home-confirm`, typed)
		var disabled bool
		b.eval(`document.querySelector('#home-delete-yes').disabled`, &disabled)
		if !disabled {
			t.Errorf("typed %q: the delete button is enabled", typed)
		}
	}
	b.fill(`#home-confirm`, "ann")
	b.waitFor("the button enabled", `!document.querySelector('#home-delete-yes').disabled`)
	b.check("home-delete-dialog")
	b.phoneFit("home-delete-dialog")
	// Refused while train runs: the server's words beside the field.
	b.click(`#home-delete-yes`)
	b.waitFor("the 409", `document.querySelector('#home-confirm-error')`)
	if got, want := b.text(`#home-confirm-error`), "mounted by VMs that are not stopped: train (running)"; !strings.Contains(got, want) {
		t.Errorf("the refusal says %q, want %q", got, want)
	}
	var described string
	b.eval(`document.querySelector('#home-confirm').getAttribute('aria-describedby') + ' ' + document.querySelector('#home-confirm').getAttribute('aria-invalid')`, &described)
	if described != "home-confirm-error true" {
		t.Errorf("the field after the refusal: %q", described)
	}
	if _, err := os.Stat(filepath.Join(home, "work", "notes.txt")); err != nil {
		t.Errorf("the refused delete touched the home: %v", err)
	}
	b.check("home-delete-refused")

	// train stopped: deleted.
	if _, err := env.Store.UpdateVMState(ctx, work.ID, work.Version, store.VMUpdate{State: store.VMStopped}); err != nil {
		t.Fatal(err)
	}
	b.click(`#home-delete-yes`)
	b.waitFor("the home gone", `!document.querySelector('#home-delete-dialog') && document.querySelector('#home-none')`)
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Errorf("the home is still there: %v", err)
	}
	for sel, want := range map[string]string{
		`.said`:      "Your home is deleted.",
		`#home-none`: "A new, empty one is made the next time a VM of yours that has a home is created",
	} {
		if got := b.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
	var left int
	b.eval(`document.querySelectorAll('#home-delete, #home-usage').length`, &left)
	if left != 0 {
		t.Errorf("%d of the delete button and the usage are left on a home that is gone", left)
	}
	b.check("home-deleted")

	// In Chinese: the dialog, and the home that is gone.
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	b.eval(`document.cookie = 'gpuvm_lang=zh-CN; path=/'`, nil)
	b.run(chromedp.Navigate(env.URL+"/storage"), chromedp.WaitVisible(`#home-delete`, chromedp.ByQuery))
	if got, want := b.text(`#home-host`), "它位于节点 gpu-01 上：挂载它的虚拟机在该节点能运行时会被放置在那里。"; got != want {
		t.Errorf("the home's node in Chinese: %q, want %q", got, want)
	}
	b.check("home-zh")
	b.click(`#home-delete`)
	b.run(chromedp.WaitVisible(`#home-delete-dialog`, chromedp.ByQuery))
	if got := b.text(`#home-delete-dialog`); !strings.Contains(got, "输入你的用户名 ann 以确认") || !strings.Contains(got, "其他内容都不会被删除") {
		t.Errorf("the dialog in Chinese:\n%s", got)
	}
	if bad := b.chinese("storage"); len(bad) > 0 {
		t.Errorf("English on the Chinese page:\n%s", strings.Join(bad, "\n"))
	}
	b.check("home-delete-dialog-zh")
	b.phoneFit("home-delete-dialog-zh")
	b.fill(`#home-confirm`, "ann")
	b.click(`#home-delete-yes`)
	b.waitFor("the home gone, in Chinese", `document.querySelector('#home-none')?.textContent.includes('新的空主目录')`)
	b.check("home-deleted-zh")
}
