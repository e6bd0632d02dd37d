package portal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// The ask form offers ann's shares and detached data disks as
// checkboxes: a share refused (one gone since the page was read) and a
// disk refused (attached elsewhere meanwhile) are each shown beside their
// group; then the VM is asked for with a share and a disk, which the
// server records. With no detached disk left, the disks' group is not
// shown. In Chinese too.
func TestCatalogueSharesAndDisksInChromium(t *testing.T) {
	needBrowser(t)
	env, vms := storageEnv(t, false, storageFacts{datasets: "小组的数据集", course: "课程资料"}, "升级前", "全新安装")
	ctx := context.Background()
	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)
	for _, n := range []string{"data1", "spare", "other"} {
		if st := b.jsFetch("POST", "/v1/volumes", fmt.Sprintf(`{"name": %q, "size": "1GiB"}`, n), true); st >= 300 {
			t.Fatalf("create disk %s: %d", n, st)
		}
	}
	vol := func(name string) *store.Volume {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			v, err := env.Store.GetVolumeByName(ctx, "ann", name)
			if err == nil && v.State == store.VolReady {
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("disk %s never ready: %+v, %v", name, v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	attach := func(name, vmID string) {
		t.Helper()
		if st := b.jsFetch("POST", "/v1/volumes/"+vol(name).ID+"/actions/attach", fmt.Sprintf(`{"vm": %q}`, vmID), true); st >= 300 {
			t.Fatalf("attach %s: %d", name, st)
		}
	}
	attach("other", vms["box"].ID)
	vol("data1")
	vol("spare")

	seat := `li[aria-labelledby="profile-seat"]`
	open := func() {
		b.run(chromedp.Navigate(env.URL+"/"), chromedp.WaitVisible(seat+` button`, chromedp.ByQuery),
			chromedp.Click(seat+` button`, chromedp.ByQuery), chromedp.WaitVisible(`#ask-seat-name`, chromedp.ByQuery))
	}
	open()
	b.waitFor("the groups", `document.querySelector('#ask-seat-shares') && document.querySelector('#ask-seat-volumes')`)
	for sel, want := range map[string]string{
		`#ask-seat-shares`:  "Shares to mount",
		`#ask-seat-volumes`: "Data disks to attach",
	} {
		if got := b.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
	if got := b.text(`label:has(#ask-seat-share-datasets)`); !strings.Contains(got, "read-write") {
		t.Errorf("datasets: %q", got)
	}
	if got := b.text(`label:has(#ask-seat-share-course)`); !strings.Contains(got, "read-only") {
		t.Errorf("course: %q", got)
	}
	var offered []string
	b.eval(`[...document.querySelectorAll('#ask-seat-volumes input[type=checkbox]')].map((x) => x.value)`, &offered)
	if !slices.Equal(offered, []string{"data1", "spare"}) {
		t.Errorf("disks offered: %v, want data1 and spare (other is attached to box)", offered)
	}
	b.run(chromedp.ScrollIntoView(`#ask-seat-shares`, chromedp.ByQuery))
	b.check("ask-extras")
	b.phoneFit("ask-extras")

	// A share gone since the page read the list: refused beside the shares.
	b.eval(`(() => { const c = document.querySelector('#ask-seat-share-course'); c.value = 'gone'; c.checked = true; return true; })()`, nil)
	b.click(seat + ` button[type=submit]`)
	b.waitFor("the share refused", `document.querySelector('#ask-seat-shares-error')`)
	if got := b.text(`#ask-seat-shares-error`); !strings.Contains(got, `unknown share "gone"`) {
		t.Errorf("the share's refusal: %q", got)
	}
	var elsewhere int
	b.eval(`document.querySelectorAll('.ask .notice.error, #ask-seat-volumes-error').length`, &elsewhere)
	if elsewhere != 0 {
		t.Errorf("the share's refusal is shown %d more times", elsewhere)
	}
	b.eval(`(() => { const c = document.querySelector('#ask-seat-share-course'); c.value = 'course'; c.checked = false; return true; })()`, nil)

	// A disk attached to another VM meanwhile: refused beside the disks.
	b.click(`#ask-seat-volume-spare`)
	attach("spare", vms["box"].ID)
	b.click(seat + ` button[type=submit]`)
	b.waitFor("the disk refused", `document.querySelector('#ask-seat-volumes-error')`)
	if got := b.text(`#ask-seat-volumes-error`); !strings.Contains(got, "spare") {
		t.Errorf("the disk's refusal: %q", got)
	}
	b.run(chromedp.ScrollIntoView(`#ask-seat-volumes`, chromedp.ByQuery))
	b.check("ask-extras-refused")

	// Asked with datasets and data1: the server has them.
	b.click(`#ask-seat-volume-spare`)
	b.click(`#ask-seat-share-datasets`)
	b.click(`#ask-seat-volume-data1`)
	b.run(chromedp.SendKeys(`#ask-seat-name`, "withdata", chromedp.ByQuery),
		chromedp.Click(seat+` button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#vm-withdata`, chromedp.ByQuery))
	vm, err := env.Store.GetVMByName(ctx, "ann", "withdata")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Shares []string `json:"shares"`
	}
	if err := json.Unmarshal([]byte(vm.Spec), &spec); err != nil || !slices.Equal(spec.Shares, []string{"datasets"}) {
		t.Errorf("the VM's shares: %v (%v), want datasets", spec.Shares, err)
	}
	if v, err := env.Store.GetVolumeByName(ctx, "ann", "data1"); err != nil || v.AttachedVM == nil || *v.AttachedVM != vm.ID {
		t.Errorf("data1 after the ask: %+v, %v; want attached to withdata", v, err)
	}

	// No detached disk left: no disks' group. In Chinese.
	b.eval(`document.cookie = 'gpuvm_lang=zh-CN; path=/'`, nil)
	open()
	b.waitFor("the shares", `document.querySelector('#ask-seat-shares')`)
	time.Sleep(300 * time.Millisecond)
	var disks int
	b.eval(`document.querySelectorAll('#ask-seat-volumes').length`, &disks)
	if disks != 0 {
		t.Error("the disks' group is shown with no disk to offer")
	}
	if got := b.text(`#ask-seat-shares`); !strings.Contains(got, "要挂载的共享") || !strings.Contains(got, "只读") {
		t.Errorf("the shares in Chinese: %q", got)
	}
	if bad := b.chinese("catalogue"); len(bad) > 0 {
		t.Errorf("English on the Chinese page:\n%s", strings.Join(bad, "\n"))
	}
	b.run(chromedp.ScrollIntoView(`#ask-seat-shares`, chromedp.ByQuery))
	b.check("ask-extras-zh")
	b.phoneFit("ask-extras-zh")
}
