package images

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

func TestCheckConfig(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t, storetest.Quiet)
	for _, img := range []*store.Image{
		{Name: "ubuntu", OS: "linux", Firmware: "uefi", Format: "qcow2", Volume: "u.qcow2"},
		{Name: "win", OS: "windows", Firmware: "uefi", Format: "qcow2", Volume: "w.qcow2"},
		{Name: "installer", OS: "linux", Firmware: "bios", Format: "iso", Volume: "i.iso"},
	} {
		img.SHA256, img.Pool, img.Path, img.Origin, img.CreatedBy = "x", "gpuvm", "/p/"+img.Volume, store.ImageImported, "root"
		if err := st.CreateImage(ctx, img, true); err != nil {
			t.Fatal(err)
		}
	}
	l := new(config.Loader)
	cfg, diags := l.Parse(config.Source{Name: "images.hcl", Data: []byte(`image "fine" { imported = "ubuntu" }
image "gone" { imported = "debian" }
image "old" {
  imported = "ubuntu"
  version  = 4
}
image "wrong-os" { imported = "win" }
image "cd" {
  imported = "installer"
  firmware = "bios"
}
image "file" { path = "/x.qcow2" }
profile "a" {
  disk { image = "fine" }
}
profile "b" {
  disk { image = "old" }
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	got, err := CheckConfig(ctx, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`images.hcl:8:1: warning: image "cd" names imported image installer@1, an ISO; a VM's disk needs a qcow2 or raw image`,
		`images.hcl:2:1: warning: image "gone" names imported image debian (newest), which is not in the store (gpuvm admin images lists them); VMs of its profiles cannot be created`,
		`images.hcl:3:1: warning: image "old" names imported image ubuntu@4, which is not in the store (gpuvm admin images lists them); VMs of its profiles cannot be created`,
		`images.hcl:7:1: warning: image "wrong-os" says os = "linux"; imported image win@1 is windows`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("CheckConfig:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	recs, _ := st.ListImages(ctx)
	using := ProfilesUsing(cfg, recs)
	if strings.Join(using[recs[1].ID], ",") != "a" || len(using) != 1 { // ubuntu@1, followed by "fine"
		t.Fatalf("ProfilesUsing = %v (records %+v)", using, recs)
	}
}
