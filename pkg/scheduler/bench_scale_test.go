package scheduler

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// BenchmarkPlaceHosts times one placement decision over 1,000 and 10,000
// hosts × 8 GPUs in mixed states (bigCluster), each need of benchNeeds in
// turn: p50 and p99 per placement (target at 10,000 hosts: p99 under
// 2 ms), and how they grow with the hosts (about linearly: a placement
// looks at every GPU that could take the need).
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
			sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
			b.ReportMetric(float64(durs[len(durs)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds()), "p99-µs")
		})
	}
}
