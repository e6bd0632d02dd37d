package simulate

import (
	"fmt"
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

// BenchmarkTasksAgainstVMs replays each example trace under fifo as VMs
// held to their lease and as tasks whose real run is drawn from 20–100 %
// of it (DefaultTaskDraw: seed 1), and reports (it does not assert) the
// GPU-hours given back early, the mean and p90 wait and the largest
// type's acceptance (started within the hour's maximum wait) of each.
// Run it once: go test ./pkg/scheduler/simulate -run '^$' -bench
// TasksAgainstVMs -benchtime 1x
func BenchmarkTasksAgainstVMs(b *testing.B) {
	for _, ex := range []struct{ name, cluster, trace string }{
		{"mig", "mig-cluster.hcl", "mig-saturated.csv"},
		{"vgpu", "vgpu-cluster.hcl", "vgpu-mixed.csv"},
	} {
		b.Run(ex.name, func(b *testing.B) {
			setup, tr := loadExample(b, ex.cluster, ex.trace)
			var c *TaskComparison
			for i := 0; i < b.N; i++ {
				var err error
				if c, err = CompareTasks(setup, tr, PolicySpec(config.OrderFIFO), DefaultTaskDraw); err != nil {
					b.Fatal(err)
				}
			}
			for name, s := range map[string]TaskSide{"vms": c.VMs, "tasks": c.Tasks} {
				b.ReportMetric(s.GivenBackGPUHours, name+"-given-back-gpuh")
				b.ReportMetric(s.MeanWaitMin, name+"-wait-mean-min")
				b.ReportMetric(s.P90WaitMin, name+"-wait-p90-min")
				b.ReportMetric(100*s.LargestAcceptance(), name+"-largest-accept-%")
			}
			b.Logf("%s: largest %s; VMs %s; tasks %s", ex.name, c.Largest, sideText(c.VMs), sideText(c.Tasks))
		})
	}
}

func sideText(s TaskSide) string {
	return fmt.Sprintf("granted %.1f GPU-h, used %.1f, given back %.1f; accepted %d/%d; wait mean %.1f p90 %.1f min; largest %d/%d; utilisation %.1f%%",
		s.GrantedGPUHours, s.UsedGPUHours, s.GivenBackGPUHours, s.Accepted, s.Requests, s.MeanWaitMin, s.P90WaitMin, s.LargestAccepted, s.LargestRequested, 100*s.Utilization)
}
