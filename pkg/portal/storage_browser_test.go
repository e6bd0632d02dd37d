package portal_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/capability"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// storageConfig is the browser tests' profiles with a profile whose VMs
// have a qcow2 system disk (so snapshots may be taken), a disk quota of
// 3 GiB, snapshots kept 30 days, two shares ann may mount (one read-write,
// one read-only) and, when homes is set, homes (%[1]s and %[2]s: the
// shares' directories; %[3]s: the homes block or nothing; %[4]s and %[5]s
// the shares' descriptions).
const storageConfig = profiles + `
image "desk" { imported = "ubuntu" }
profile "plain" {
  vcpus  = 1
  memory = "1GiB"
  disk { image = "desk" }
}
server {
  storage {
    %[3]s
    share "datasets" {
      description = "%[4]s"
      path        = "%[1]s"
      read_write  = ["user:ann"]
      quota       = "500GiB"
    }
    share "course" {
      description = "%[5]s"
      path        = "%[2]s"
      read_only   = ["user:ann"]
    }
  }
}
policy {
  defaults {
    storage {
      disk_quota = "3GiB"
    }
    snapshots {
      keep         = 5
      expire_after = "30d"
    }
  }
}
`

// homeUsage is the home quotas' last reading the tests give the server.
type homeUsage []api.VolumeUsage

func (h homeUsage) Usage() []api.VolumeUsage { return h }

// storageEnv starts a server with storageConfig, data disks kept in the
// store, and ann's two VMs, box (stopped) and up (running), each with a
// ready snapshot: up's quiesced (label upLabel), box's crash-consistent
// (boxLabel).
func storageEnv(t *testing.T, homes bool, facts storageFacts, upLabel, boxLabel string) (*clienttest.Env, map[string]*store.VM) {
	t.Helper()
	homesBlock := ""
	if homes {
		root := facts.homesRoot
		if root == "" {
			root = t.TempDir()
		}
		homesBlock = fmt.Sprintf("homes {\n      root  = %q\n      mount = \"/gpuvm/home\"\n    }", root)
	}
	cfg := fmt.Sprintf(storageConfig, t.TempDir(), t.TempDir(), homesBlock, facts.datasets, facts.course) + facts.profiles
	env := clienttest.New(t, clienttest.Options{Profiles: cfg, Host: "test-host", Volumes: true, HomeUsage: facts.usage,
		Capabilities: &capability.Host{Hypervisor: capability.HypervisorOf("QEMU", 9000000, 7002000)}})
	env.Worker.Pause() // the VMs stay as written
	ctx := context.Background()
	host := "test-host"
	vms := map[string]*store.VM{}
	for _, v := range []struct{ name, state, label, consistency string }{
		{"box", store.VMStopped, boxLabel, store.SnapCrashConsists},
		{"up", store.VMRunning, upLabel, store.SnapQuiesced},
	} {
		vm := &store.VM{Name: v.name, Owner: "ann", Profile: "plain", Hours: 8}
		if _, err := env.Store.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
			t.Fatal(err)
		}
		finishOps(t, env.Store, vm.ID)
		next, err := env.Store.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: v.state, Host: &host})
		if err != nil {
			t.Fatal(err)
		}
		vms[v.name] = next
		sn := &store.Snapshot{VMID: vm.ID, Owner: "ann", Label: v.label}
		if _, err := env.Store.CreateSnapshot(ctx, sn, "ann", store.SnapshotLimit{}); err != nil {
			t.Fatal(err)
		}
		if err := env.Store.SetSnapshotState(ctx, sn.ID, store.SnapReady, []string{store.SnapCreating}, store.SnapshotUpdate{Consistency: v.consistency}); err != nil {
			t.Fatal(err)
		}
		finishOps(t, env.Store, vm.ID)
	}
	env.Worker.Paused.Store(false) // it takes the snapshots the page asks for
	return env, vms
}

// storageFacts is what storageEnv's server says beyond the configuration.
type storageFacts struct {
	usage            homeUsage
	datasets, course string // the shares' descriptions
	homesRoot        string // the homes' root (homes only; "": a new directory)
	profiles         string // more profiles
}

func finishOps(t *testing.T, st *store.Store, vmID string) {
	t.Helper()
	ops, err := st.ListOperations(context.Background(), vmID)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.FinishedAt == nil {
			if err := st.FinishOperation(context.Background(), op.ID, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// fill types value into a field as a person does: the page hears input
// (or change, for a select).
func (b *browser) fill(sel, value string) {
	b.t.Helper()
	b.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q;
	  e.dispatchEvent(new Event(e.tagName === 'SELECT' ? 'change' : 'input', {bubbles: true})); return true; })()`, sel, value), nil)
}

func (b *browser) click(sel string) {
	b.t.Helper()
	b.run(chromedp.Click(sel, chromedp.ByQuery))
}

// My storage, in English: the home's used/quota from the home quotas'
// reading and how it holds (and no node, none being recorded); the
// shares ann may mount; a data disk created, refused (name taken, over
// the quota, shrunk, attached to a running VM) beside the field the
// server names, grown, attached, detached and deleted, all through the
// page; the snapshots with their consistency, a restore refused while
// the VM runs, a hostile label refused, and a snapshot taken.
func TestStoragePageInChromium(t *testing.T) {
	needBrowser(t)
	quota := uint64(10 << 30)
	root := t.TempDir() // ann's home is there: the reading below is of it
	if err := os.Mkdir(filepath.Join(root, "ann"), 0o700); err != nil {
		t.Fatal(err)
	}
	env, vms := storageEnv(t, true, storageFacts{homesRoot: root, usage: homeUsage{{Kind: api.VolumeHome, Owner: "ann", Name: "ann", UsedBytes: 3 << 30, QuotaBytes: &quota,
		Enforcement: "none", Note: "the homes at /srv/homes are on ext4 without project quotas"}},
		datasets: "the group's datasets", course: "the course's material"}, "before upgrade", "clean install")
	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)
	b.run(chromedp.Click(`nav a[href="/storage"]`, chromedp.ByQuery), chromedp.WaitVisible(`#home-usage`, chromedp.ByQuery))
	for sel, want := range map[string]string{
		`#home-mount`:              "/gpuvm/home",
		`#home-usage`:              "3 GiB of 10 GiB used (30%)",
		`#home-enforcement`:        "not enforced on this server",
		`#share-datasets .mode`:    "read-write",
		`#share-course .mode`:      "read-only",
		`#share-course`:            "Read-only is enforced on the host",
		`#shares`:                  "gpuvm create PROFILE --share course",
		`#disk-quota`:              "0 MiB of 3 GiB",
		`#snaps-up`:                "before upgrade",
		`#snaps-up .consistency`:   "quiesced: the guest agent froze the file systems",
		`#snaps-box .consistency`:  "crash-consistent",
		`#snaps-up .why`:           "Stop up first",
		`#snap-keep`:               "You may keep 5 snapshots",
		`nav a[aria-current=page]`: "My storage",
	} {
		if got := b.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
	// No node recorded for ann's home (a single node's server): the card
	// names none.
	var hostShown int
	b.eval(`document.querySelectorAll('#home-host').length`, &hostShown)
	if hostShown != 0 {
		t.Errorf("the home's card names a node, with none recorded: %q", b.text(`#home-host`))
	}
	var restore map[string]bool
	b.eval(`(() => { const [u, x] = ['#snaps-up .restore', '#snaps-box .restore'].map((s) => document.querySelector(s));
	  return {up: u.disabled, box: x.disabled, described: u.getAttribute('aria-describedby') === u.closest('li').querySelector('.why').id}; })()`, &restore)
	if !restore["up"] || restore["box"] || !restore["described"] {
		t.Errorf("restore buttons: %v, want up's disabled (its reason beside it), box's enabled", restore)
	}
	b.check("storage")

	// A disk, made through the form.
	b.fill(`#disk-name`, "scratch")
	b.fill(`#disk-size`, "1GiB")
	b.click(`#create-disk button[type=submit]`)
	b.waitFor("the disk", `document.querySelector('#disk-scratch[data-state="ready"]')`)
	if got := b.text(`#disk-quota`); !strings.Contains(got, "1 GiB of 3 GiB (33%)") {
		t.Errorf("the disk quota after one disk: %q", got)
	}
	// Refused, each beside its field: the name taken, over the quota.
	b.fill(`#disk-name`, "scratch")
	b.fill(`#disk-size`, "1GiB")
	b.click(`#create-disk button[type=submit]`)
	b.waitFor("the name refused", `document.querySelector('#disk-name-error')?.textContent.includes('you already have a volume of that name')`)
	var invalid string
	b.eval(`document.querySelector('#disk-name').getAttribute('aria-describedby') + ' ' + document.querySelector('#disk-name').getAttribute('aria-invalid')`, &invalid)
	if invalid != "disk-name-error true" {
		t.Errorf("the name field after its refusal: %q", invalid)
	}
	b.fill(`#disk-name`, "big")
	b.fill(`#disk-size`, "5GiB")
	b.click(`#create-disk button[type=submit]`)
	b.waitFor("the size refused", `document.querySelector('#disk-size-error') && !document.querySelector('#disk-name-error')`)
	if got, want := b.text(`#disk-size-error`), "would hold 6GiB (1GiB already, 5GiB asked), past the 3GiB allowed by policy defaults"; !strings.Contains(got, want) {
		t.Errorf("over the quota: %q, want %q", got, want)
	}
	b.check("storage-refused")

	// Grow: a smaller size refused beside the size, then 2 GiB.
	b.click(`#disk-scratch .buttons button:nth-child(1)`)
	b.run(chromedp.WaitVisible(`#disk-scratch-size`, chromedp.ByQuery))
	b.fill(`#disk-scratch-size`, "512MiB")
	b.click(`#disk-scratch form button[type=submit]`)
	b.waitFor("the shrink refused", `document.querySelector('#disk-scratch-size-error')?.textContent.includes('only grows')`)
	b.fill(`#disk-scratch-size`, "2GiB")
	b.click(`#disk-scratch form button[type=submit]`)
	b.waitFor("grown", `document.querySelector('#disk-scratch .size')?.textContent === '2 GiB' && !document.querySelector('#disk-scratch form')`)
	if got := b.text(`#disk-quota`); !strings.Contains(got, "2 GiB of 3 GiB (67%)") {
		t.Errorf("the disk quota after the grow: %q", got)
	}
	// Attach to the running VM: plugged in by an operation the page waits
	// for (the test's worker plugs at once), then unplugged; then to the
	// stopped one, there at its next start.
	b.click(`#disk-scratch .buttons button:nth-child(2)`)
	b.run(chromedp.WaitVisible(`#disk-scratch-vm`, chromedp.ByQuery))
	b.fill(`#disk-scratch-vm`, vms["up"].ID)
	b.click(`#disk-scratch form button[type=submit]`)
	b.waitFor("plugged into up", `document.querySelector('#disk-scratch[data-attached="up"]') && document.querySelector('.said')?.textContent.includes('scratch is plugged into up: the guest has a new disk, /dev/disk/by-id/virtio-')`)
	b.check("storage-plugged")
	b.click(`#disk-scratch .buttons button:nth-child(2)`)
	b.waitFor("unplugged", `document.querySelector('#disk-scratch[data-attached=""]') && document.querySelector('.said')?.textContent.includes('scratch is unplugged and detached')`)
	if v, err := env.Store.GetVolumeByName(context.Background(), "ann", "scratch"); err != nil || v.AttachedVM != nil || v.State != store.VolReady {
		t.Errorf("after the unplug: %+v, %v", v, err)
	}
	b.click(`#disk-scratch .buttons button:nth-child(2)`)
	b.run(chromedp.WaitVisible(`#disk-scratch-vm`, chromedp.ByQuery))
	b.fill(`#disk-scratch-vm`, vms["box"].ID)
	b.click(`#disk-scratch form button[type=submit]`)
	b.waitFor("attached", `document.querySelector('#disk-scratch[data-attached="box"]')`)
	var deletable bool
	b.eval(`!document.querySelector('#disk-scratch button.danger').disabled`, &deletable)
	if deletable {
		t.Error("an attached disk's Delete is enabled")
	}
	if v, err := env.Store.GetVolumeByName(context.Background(), "ann", "scratch"); err != nil || v.AttachedVM == nil || *v.AttachedVM != vms["box"].ID {
		t.Errorf("after attach: %+v, %v", v, err)
	}
	b.check("storage-attached")
	// Detach, then delete (confirmed).
	b.click(`#disk-scratch .buttons button:nth-child(2)`)
	b.waitFor("detached", `document.querySelector('#disk-scratch[data-attached=""]')`)
	b.click(`#disk-scratch button.danger`)
	b.run(chromedp.WaitVisible(`dialog.confirm`, chromedp.ByQuery))
	if got := b.text(`#confirm-text`); !strings.Contains(got, "Delete data disk scratch") {
		t.Errorf("the delete's question: %q", got)
	}
	b.click(`#confirm-yes`)
	b.waitFor("deleted", `!document.querySelector('#disk-scratch') && document.querySelector('#no-disks')`)
	if vs, _ := env.Store.ListVolumes(context.Background(), store.VolumeFilter{Owner: "ann"}); len(vs) != 0 {
		t.Errorf("volumes left: %+v", vs)
	}

	// Restore box's snapshot asks first; Escape leaves it be.
	b.click(`#snaps-box .restore`)
	b.run(chromedp.WaitVisible(`dialog.confirm`, chromedp.ByQuery))
	if got := b.text(`#confirm-text`); !strings.Contains(got, "Restore the disk of box to the snapshot clean install") {
		t.Errorf("the restore's question: %q", got)
	}
	b.run(chromedp.KeyEvent(kb.Escape), chromedp.WaitNotPresent(`dialog.confirm`, chromedp.ByQuery))

	// A snapshot: a hostile label refused beside it, then one taken.
	b.fill(`#snap-vm`, vms["up"].ID)
	b.fill(`#snap-label`, "<script>")
	b.click(`#take-snapshot button[type=submit]`)
	b.waitFor("the label refused", `document.querySelector('#snap-label-error')`)
	b.fill(`#snap-label`, "nightly")
	b.click(`#take-snapshot button[type=submit]`)
	b.waitFor("the snapshot taken", `[...document.querySelectorAll('#snaps-up li[data-state="ready"] h4')].some((h) => h.textContent === 'nightly')`)
	b.check("storage-snapshots")
	b.phoneFit("storage-snapshots")
}

// My storage in Chinese, on a server without homes: it says so, and
// nothing on the page is in English.
func TestStoragePageInChinese(t *testing.T) {
	needBrowser(t)
	env, _ := storageEnv(t, false, storageFacts{datasets: "小组的数据集", course: "课程资料"}, "升级前", "全新安装")
	b := newBrowser(t, env.URL, false)
	b.run(chromedp.Navigate(env.URL+"/login"), chromedp.WaitVisible(`#token`, chromedp.ByQuery))
	b.eval(`document.cookie = 'gpuvm_lang=zh-CN; path=/'`, nil)
	b.signIn(env.UserToken)
	b.run(chromedp.Navigate(env.URL+"/storage"), chromedp.WaitVisible(`#snaps-up`, chromedp.ByQuery))
	// A disk, attached, so that every part of the page has words.
	b.fill(`#disk-name`, "scratch")
	b.fill(`#disk-size`, "1GiB")
	b.click(`#create-disk button[type=submit]`)
	b.waitFor("the disk", `document.querySelector('#disk-scratch[data-state="ready"]')`)
	time.Sleep(300 * time.Millisecond)
	for sel, want := range map[string]string{
		`#home`:                  "此服务器不提供主目录",
		`#share-course .mode`:    "只读",
		`#snaps-up .consistency`: "静默一致",
		`#snaps-up .why`:         "请先停止 up",
		`#disk-quota`:            "1 GiB / 3 GiB",
	} {
		if got := b.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
	if bad := b.chinese("storage"); len(bad) > 0 {
		t.Errorf("English on the Chinese page:\n%s", strings.Join(bad, "\n"))
	}
	b.check("storage-zh")
	b.phoneFit("storage-zh")
}

// My storage with an image home (no project quotas on the server; the
// home is a filesystem of its own): the quota is said enforced, not
// warned about, and the server's note on the image's size is shown; a
// share with a quota shows its use and that its quota is not enforced;
// in English and in Chinese.
func TestStoragePageImageHome(t *testing.T) {
	needBrowser(t)
	quota := uint64(10 << 30)
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "ann"), 0o700); err != nil {
		t.Fatal(err)
	}
	note := "your home is a filesystem of 8GiB: it grows to its quota the next time none of your VMs runs"
	shareQuota := uint64(500 << 30)
	env, _ := storageEnv(t, true, storageFacts{homesRoot: root, usage: homeUsage{{Kind: api.VolumeHome, Owner: "ann", Name: "ann", UsedBytes: 1 << 30,
		QuotaBytes: &quota, Enforcement: "image", Note: note},
		{Kind: api.VolumeShare, Name: "datasets", UsedBytes: 50 << 30, QuotaBytes: &shareQuota, Enforcement: "none", Note: "the files of share datasets at … are on tmpfs"}},
		datasets: "小组的数据集", course: "课程资料"}, "一", "二") // people's words, in the Chinese page's language
	b := newBrowser(t, env.URL, false)
	b.signIn(env.UserToken)
	for _, lang := range []struct{ cookie, enforced, shareUsed, shareNot string }{
		{"en", "The quota is enforced", "50 GiB of 500 GiB used (10%)", "The share's quota is not enforced"},
		{"zh-CN", "配额强制执行", "已用 50 GiB / 500 GiB（10%）", "此服务器不强制执行该共享的配额"},
	} {
		b.eval(fmt.Sprintf(`document.cookie = 'gpuvm_lang=%s; path=/'`, lang.cookie), nil)
		b.run(chromedp.Navigate(env.URL+"/storage"), chromedp.WaitVisible(`#home-enforcement`, chromedp.ByQuery))
		if got := b.text(`#home-enforcement`); !strings.Contains(got, lang.enforced) {
			t.Errorf("%s: #home-enforcement %q, want %q", lang.cookie, got, lang.enforced)
		}
		var warned bool
		b.eval(`document.querySelector('#home-enforcement').classList.contains('warn')`, &warned)
		if warned {
			t.Errorf("%s: an image home's quota is shown as a warning", lang.cookie)
		}
		// A share's quota: its use as last read, and that it is not enforced.
		if got := b.text(`#share-datasets .share-usage`); got != lang.shareUsed {
			t.Errorf("%s: the share's usage %q, want %q", lang.cookie, got, lang.shareUsed)
		}
		if got := b.text(`#share-datasets .share-enforcement`); !strings.Contains(got, lang.shareNot) {
			t.Errorf("%s: the share's enforcement %q, want %q", lang.cookie, got, lang.shareNot)
		}
		var words string // the server's words, folded under their summary
		b.eval(`(document.querySelector('#home .server-words p') || {}).textContent || ''`, &words)
		if words != note {
			t.Errorf("%s: the home's card gives the server's words %q, want its note %q", lang.cookie, words, note)
		}
		if lang.cookie == "zh-CN" {
			if bad := b.chinese("storage-image-home"); len(bad) > 0 {
				t.Errorf("English on the Chinese page:\n%s", strings.Join(bad, "\n"))
			}
		}
		b.check("storage-image-home-" + lang.cookie)
		b.phoneFit("storage-image-home-" + lang.cookie)
	}
}
