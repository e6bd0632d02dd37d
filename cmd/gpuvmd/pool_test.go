package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
)

// gpuvmd on configs/dev and libvirt's test driver, as people try it: it
// makes the storage pool libvirt lacks (at configs/dev's pool directory,
// under /var/lib), and a VM of a profile with a cloud-init seed runs,
// saying that its seed is not attached (the test driver cannot store it).
func TestDevConfigOnTestDriver(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	state := t.TempDir()
	addrc, errc, logs := make(chan string, 1), make(chan error, 1), &syncBuf{}
	go func() {
		errc <- runWithReady(ctx, []string{"--config", "../../configs/dev", "--state-dir", state, "--listen", "127.0.0.1:0",
			"--plugin-dir", pluginDir, "--libvirt-uri", "test:///default"}, logs, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatalf("gpuvmd exited: %v\n%s", err, logs.String())
	case <-time.After(90 * time.Second):
		t.Fatalf("gpuvmd not ready\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `msg="created the storage pool" pool=gpuvm-dev dir=/var/lib/libvirt/images/gpuvm-dev`) {
		t.Errorf("the log does not say the pool was made:\n%s", logs.String())
	}
	token, err := os.ReadFile(filepath.Join(state, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, body string, v any) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(v)
		return resp.StatusCode
	}
	var created api.CreateVMResponse
	if code := do("POST", "/v1/vms", `{"profile":"tiny","name":"box"}`, &created); code != 202 {
		t.Fatalf("POST /v1/vms: %d %+v\n%s", code, created, logs.String())
	}
	var vm api.VM
	for deadline := time.Now().Add(60 * time.Second); vm.State != api.VMRunning; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) || vm.State == api.VMFailed {
			t.Fatalf("VM %+v\n%s", vm, logs.String())
		}
		do("GET", "/v1/vms/box", "", &vm)
	}
	if !strings.HasPrefix(vm.Reason, "cloud-init seed not attached: libvirt's test driver cannot store volume contents") {
		t.Errorf("running VM's reason %q", vm.Reason)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// The pool is made at start when missing, and again when a reload names
// another pool; a pool that exists is used as it is (not redefined, not
// moved, not marked autostart).
func TestPoolKeeper(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuf
	log := slog.New(slog.NewTextHandler(&logs, nil))
	hv, err := hypervisor.Open(ctx, "test:///default", log)
	if err != nil {
		t.Fatal(err)
	}
	defer hv.Close()
	id := uuid.NewString()[:8]
	first, second := "keep-a-"+id, "keep-b-"+id
	// The second pool exists already, elsewhere, inactive.
	elsewhere := t.TempDir()
	doc, err := (&libvirtxml.StoragePool{Type: "dir", Name: second, Target: &libvirtxml.StoragePoolTarget{Path: elsewhere}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	lv, err := libvirt.NewConnect("test:///default") // the same in-process driver as hv's
	if err != nil {
		t.Fatal(err)
	}
	defer lv.Close()
	p, err := lv.StoragePoolDefineXML(doc, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Free()
	for _, p := range []string{first, second} {
		t.Cleanup(func() { _ = hv.DeletePool(context.Background(), p) })
	}

	dir := t.TempDir()
	write := func(pool string) {
		t.Helper()
		text := fmt.Sprintf("server {\n  libvirt {\n    storage_pool     = %q\n    storage_pool_dir = \"/srv/pools/%s\"\n  }\n}\n", pool, pool)
		if err := os.WriteFile(filepath.Join(dir, "server.hcl"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(first)
	cfg, err := loadConfig(dir, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	keepPool(ctx, &poolKeeper{hv: hv, log: log}, cfg)
	made := func(pool string) string {
		return fmt.Sprintf(`msg="created the storage pool" pool=%s dir=/srv/pools/%s`, pool, pool)
	}
	if !strings.Contains(logs.String(), made(first)) {
		t.Fatalf("first pool not made:\n%s", logs.String())
	}
	if st, err := hv.PoolInfo(ctx, first); err != nil || st.Dir != "/srv/pools/"+first || !st.Active || !st.Autostart {
		t.Errorf("first pool %+v, %v", st, err)
	}

	write(second)
	if err := cfg.reload(io.Discard); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), made(second)) {
		t.Errorf("the pool that existed was made again:\n%s", logs.String())
	}
	if st, err := hv.PoolInfo(ctx, second); err != nil || st.Dir != elsewhere || !st.Active || st.Autostart {
		t.Errorf("second pool %+v, %v; want at %s, started, autostart untouched", st, err, elsewhere)
	}

	// A pool libvirt will not make is an error in the log, naming it.
	third := "keep-c-" + id
	k := &poolKeeper{hv: hv, log: log}
	if err := k.prepare(ctx, config.Libvirt{StoragePool: third, StoragePoolDir: "not/absolute"}); err == nil {
		t.Error("a pool at a relative directory was made")
	}
	if want := `level=ERROR msg="could not make the storage pool: VMs with a disk overlay or a cloud-init seed fail until it exists (gpuvm admin doctor checks it)" pool=` + third; !strings.Contains(logs.String(), want) {
		t.Errorf("no %q in the log:\n%s", want, logs.String())
	}
}
