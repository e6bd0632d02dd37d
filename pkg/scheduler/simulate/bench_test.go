package simulate

import (
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
)

// BenchmarkReplay replays each example trace under fifo, fairshare and
// first fit, and reports (it does not assert) the largest profile's
// acceptance against first fit's, the GPU-hours against first fit's and,
// for the vGPU trace, what mixed-size mode gains.
func BenchmarkReplay(b *testing.B) {
	for _, ex := range []struct{ name, cluster, trace string }{
		{"mig", "mig-cluster.hcl", "mig-saturated.csv"},
		{"vgpu", "vgpu-cluster.hcl", "vgpu-mixed.csv"},
	} {
		b.Run(ex.name, func(b *testing.B) {
			setup, tr := loadExample(b, ex.cluster, ex.trace)
			mixed := PolicySpec(config.OrderFIFO)
			mixed.Name, mixed.MixedSize = "fifo+mixed-size", true
			specs := []Spec{Baseline, PolicySpec(config.OrderFIFO), PolicySpec(config.OrderFairshare), mixed}
			var rep *Report
			for i := 0; i < b.N; i++ {
				var err error
				if rep, err = Compare(setup, tr, specs); err != nil {
					b.Fatal(err)
				}
			}
			base := rep.Run(Baseline.Name)
			for _, name := range []string{"fifo", "fairshare"} {
				x := rep.Run(name)
				b.ReportMetric(float64(x.TypeOf(rep.Largest).Accepted)/float64(base.TypeOf(rep.Largest).Accepted), name+"-largest-x")
				b.ReportMetric(100*(x.GPUHoursServed/base.GPUHoursServed-1), name+"-gpuh-%")
			}
			if ex.name == "vgpu" {
				m, f := rep.Run("fifo+mixed-size"), rep.Run("fifo")
				b.ReportMetric(100*(m.GPUHoursServed/f.GPUHoursServed-1), "mixed-gpuh-%")
				b.ReportMetric(100*(m.Acceptance-f.Acceptance), "mixed-accept-pts")
			}
		})
	}
}
