package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// gpuvmd is SIGKILLed at each step of a data disk's creation (its row
// written, then its volume made in the pool), on libvirt's test driver
// hosted by libvirtd, whose pool outlives gpuvmd; no guest boots. A fresh
// gpuvmd on the same state finishes the disk: ready, its one volume in the
// pool (one made by the killed gpuvmd is taken, not made twice), no
// orphan; deleted through the API, its volume goes.
func TestCrashDuringDataDiskCreate(t *testing.T) {
	hv := libvirt(t, testDriverURI)
	base := filepath.Join(t.TempDir(), "base.raw")
	if err := os.WriteFile(base, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, point := range orchestrator.VolumeHooks {
		t.Run(strings.ReplaceAll(point, " ", "_"), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, worldConfig{preset: "l40sx4", uri: testDriverURI, pool: testDriverPool,
				profiles: fmt.Sprintf(crashProfiles, base, "vgpu", "type", "L40S-12Q")})
			w.start("GPUVM_TEST_PAUSE_AT=" + point)
			name := "d" + randHex(4)
			go func() {
				// Answered only when gpuvmd is killed: its error is expected.
				_, _ = w.cl.CreateVolume(context.WithoutCancel(w.ctx(2*time.Minute)), name, "1MiB")
			}()
			re := regexp.MustCompile(`GPUVM_TEST_PAUSE_AT: paused.* point="?` + regexp.QuoteMeta(point) + `"? vm=([0-9a-f-]{36})`)
			m, err := w.proc.WaitLog(w.ctx(time.Minute), re) // the match and the volume's id
			if err != nil || len(m) != 2 {
				t.Fatalf("gpuvmd did not pause at %q: %q %v", point, m, err)
			}
			id := m[1]
			v, err := w.cl.GetVolume(w.ctx(30*time.Second), id)
			if err != nil || v.State != store.VolCreating {
				t.Fatalf("paused at %q: volume %+v %v; want it creating", point, v, err)
			}
			if files := w.diskFiles(hv, id); len(files) != map[string]int{orchestrator.HookVolumeRecorded: 0, orchestrator.HookVolumeMade: 1}[point] {
				t.Fatalf("paused at %q: the pool holds %q for the disk", point, files)
			}
			w.kill()

			w.start()
			deadline := time.Now().Add(time.Minute)
			for v.State != store.VolReady && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
				if v, err = w.cl.GetVolume(w.ctx(30*time.Second), id); err != nil {
					t.Fatal(err)
				}
			}
			if v.State != store.VolReady || v.Error != "" || v.Name != name || v.SizeBytes != 1<<20 {
				t.Fatalf("after the restart the disk is %+v; want it ready", v)
			}
			if files := w.diskFiles(hv, id); len(files) != 1 {
				t.Fatalf("after the restart the pool holds %q for the disk; want its one volume", files)
			}
			orphans, err := w.cl.Orphans(w.ctx(30 * time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range orphans.Items {
				if o.Kind == api.OrphanVolume && strings.Contains(o.Name, id) {
					t.Errorf("the disk is an orphan after the restart: %+v", o)
				}
			}
			if err := w.cl.DeleteVolume(w.ctx(30*time.Second), id); err != nil {
				t.Fatal(err)
			}
			if files := w.diskFiles(hv, id); len(files) != 0 {
				t.Fatalf("the deleted disk's volume is left: %q", files)
			}
			w.noErrors()
		})
	}
}

// diskFiles are the pool's volumes of the data disk id (its name ends
// with the id: store.DiskVolumeName).
func (w *world) diskFiles(hv *hypervisor.Conn, id string) []string {
	w.t.Helper()
	vols, err := hv.Volumes(w.ctx(30*time.Second), w.pool)
	if err != nil {
		w.t.Fatalf("volumes of pool %s: %v", w.pool, err)
	}
	var out []string
	for _, v := range vols {
		if strings.HasPrefix(v, "gpuvm-disk-") && strings.HasSuffix(v, "-"+id+".qcow2") {
			out = append(out, v)
		}
	}
	return out
}
