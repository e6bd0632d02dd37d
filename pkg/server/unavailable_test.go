package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// unavailableHCL: the desktop profile's image, kernel and initrd are files
// under DIR that the test makes only later; cpu's kernel is there.
const unavailableHCL = `
server {
  libvirt { images_dir = "DIR" }
}
image "desktop" {
  path   = "desktop.qcow2"
  format = "qcow2"
}
profile "desktop" {
  vcpus  = 1
  memory = "1GiB"
  disk { image = "desktop" }
  boot {
    kernel = "DIR/desktop/vmlinuz"
    initrd = "DIR/desktop/initrd.img"
  }
}
profile "cpu" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "DIR/vmlinuz" }
}
`

// A profile whose image (and kernel) is not built on this server is
// marked unavailable in GET /v1/profiles, with why in words that name no
// server path; a VM of it is refused at once (422 on profile), and the
// admission says so. Once the files are there, at the next question, it is
// available and its VMs are queued.
func TestProfileUnavailableWithoutItsImage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := func(f string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("vmlinuz")
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(strings.ReplaceAll(unavailableHCL, "DIR", dir))})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	st := storetest.New(t, storetest.Quiet)
	users := fakeAuth{"ann-token": {Name: "ann"}}
	if err := st.CreateUser(ctx, &store.User{Name: "ann"}); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Deps{Auth: users, Backends: fakeBackends{}, Config: &fakeConfig{cfg: cfg}, Store: st, Worker: &countWaker{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Availability: &images.Availability{Store: st, Stat: os.Stat}})

	unavailable := func() map[string]string {
		t.Helper()
		rec, _ := send(t, s, "GET", "/v1/profiles", "ann-token", "")
		if rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		var ps []map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &ps); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range ps {
			if u, ok := p["unavailable"]; ok {
				out[p["name"].(string)], _ = u.(string)
			}
		}
		return out
	}
	want := `its disk image "desktop", its boot kernel and its boot initrd are not on this server (an admin has to build or import them)`
	if got := unavailable(); len(got) != 1 || got["desktop"] != want {
		t.Fatalf("unavailable %v; want only desktop: %q", got, want)
	}
	rec, body := send(t, s, "GET", "/v1/profiles/desktop", "ann-token", "")
	if rec.Code != 200 || body["unavailable"] != want {
		t.Errorf("GET one: %d %v", rec.Code, body)
	}
	rec, body = send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"desktop","name":"d1"}`)
	if rec.Code != 422 || body["type"] != ProblemBase+"validation" || body["field"] != "profile" ||
		body["detail"] != "profile desktop cannot be made on this server now: "+want {
		t.Errorf("POST desktop: %d %v", rec.Code, body)
	}
	if d, _ := body["detail"].(string); strings.Contains(d, "/") || strings.Contains(d, dir) {
		t.Errorf("the refusal names a server path: %q", d)
	}
	rec, body = send(t, s, "GET", "/v1/profiles/desktop/admission", "ann-token", "")
	if rec.Code != 200 || body["answer"] != "refused" || !strings.Contains(body["reason"].(string), want) {
		t.Errorf("admission: %d %v", rec.Code, body)
	}
	if rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"cpu","name":"c1"}`); rec.Code != 202 {
		t.Errorf("POST cpu: %d %v", rec.Code, body)
	}
	// The image is built: the next question sees it.
	write("desktop.qcow2")
	write("desktop/vmlinuz")
	write("desktop/initrd.img")
	if got := unavailable(); len(got) != 0 {
		t.Errorf("with the files there, unavailable %v", got)
	}
	if rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"desktop","name":"d2"}`); rec.Code != 202 {
		t.Errorf("POST desktop once built: %d %v", rec.Code, body)
	}
}
