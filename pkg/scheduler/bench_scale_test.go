package scheduler

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// BenchmarkPlaceHosts times one placement decision over 1,000 and 10,000
// hosts × 8 GPUs in mixed states (bigCluster), each need of benchNeeds in
// turn: p50 and p99 per placement (targets: p99 under 1 ms at 1,000 hosts,
// 2 ms at 10,000), and how they grow with the hosts (about linearly: a
// placement looks at every GPU that could take the need). -v logs each
// need's p50 and p99.
func BenchmarkPlaceHosts(b *testing.B) {
	for _, hosts := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			inv, allocs := bigCluster(b, hosts)
			b.ReportMetric(float64(allocs), "devices")
			durs := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				n := benchNeeds[i%len(benchNeeds)]
				start := time.Now()
				inv.Place(n, PlaceOptions{Now: t0, End: t0.Add(2 * time.Hour)})
				durs = append(durs, time.Since(start))
			}
			b.StopTimer()
			if testing.Verbose() {
				per := map[int][]time.Duration{}
				for i, d := range durs {
					per[i%len(benchNeeds)] = append(per[i%len(benchNeeds)], d)
				}
				for k, ds := range per {
					sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
					b.Logf("%-28s p50 %v p99 %v", benchNeeds[k].String(), ds[len(ds)/2], ds[len(ds)*99/100])
				}
			}
			sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
			b.ReportMetric(float64(durs[len(durs)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds()), "p99-µs")
		})
	}
}
