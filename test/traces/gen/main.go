// Command gen writes the example traces of test/traces from documented
// distributions with fixed seeds (see test/traces/README.md):
//
//	go run ./test/traces/gen -out test/traces
//
// The output is byte-for-byte the same on every run; gen_test.go checks that
// the committed traces are what it writes.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
)

// choice is one outcome of a categorical distribution.
type choice struct {
	kind, typ string
	weight    float64
}

// group is a population of users.
type group struct {
	name        string
	users       int
	priority    int
	preemptible float64 // probability that a request is preemptible
	// weight of the group's requests in the arrivals
	weight float64
}

// spec is one trace's distributions.
type spec struct {
	file   string
	seed   uint64
	days   int
	perDay float64 // mean requests per day (the diurnal curve shapes it)
	mix    []choice
	// Leases are log-normal: median hours and σ of the underlying normal,
	// clipped to [minH, maxH] and rounded to a quarter hour.
	median, sigma, minH, maxH float64
	groups                    []group
	// zipf is the exponent of user activity within a group (rank^-zipf).
	zipf float64
}

// The two traces.
var specs = []spec{
	{
		// A saturated MIG cluster: 16 H100 80GB in MIG mode
		// (mig-cluster.hcl), offered about 1.4× what it can serve.
		file: "mig-saturated.csv", seed: 7, days: 7, perDay: 560,
		mix: []choice{
			{"mig", "1g.10gb", 35}, {"mig", "1g.20gb", 10}, {"mig", "2g.20gb", 20},
			{"mig", "3g.40gb", 20}, {"mig", "4g.40gb", 5}, {"mig", "7g.80gb", 10},
		},
		median: 2, sigma: 0.8, minH: 0.25, maxH: 24,
		groups: []group{
			{"students", 14, 0, 0.6, 0.5},
			{"research", 7, 10, 0.3, 0.35},
			{"staff", 3, 50, 0, 0.15},
		},
		zipf: 0.8,
	},
	{
		// Rendering and compute seats on 12 L40S in equal-size vGPU mode
		// (vgpu-cluster.hcl): several types compete for whole GPUs.
		file: "vgpu-mixed.csv", seed: 11, days: 7, perDay: 330,
		mix: []choice{
			{"vgpu", "L40S-4Q", 20}, {"vgpu", "L40S-8Q", 25}, {"vgpu", "L40S-12Q", 25},
			{"vgpu", "L40S-16Q", 10}, {"vgpu", "L40S-24Q", 15}, {"vgpu", "L40S-48Q", 5},
		},
		median: 3, sigma: 0.7, minH: 0.5, maxH: 12,
		groups: []group{
			{"artists", 10, 10, 0, 0.6},
			{"engineers", 8, 0, 0.2, 0.4},
		},
		zipf: 0.6,
	},
}

// rate is the relative arrival rate at second s of the trace (week starts
// Monday 00:00): 1.0 on weekday working hours (09–18), 0.35 on weekday
// nights, 0.25 at weekends.
func rate(s float64) float64 {
	day := int(s/86400) % 7
	hour := math.Mod(s/3600, 24)
	switch {
	case day >= 5:
		return 0.25
	case hour >= 9 && hour < 18:
		return 1
	default:
		return 0.35
	}
}

// meanRate is the week's mean of rate, to turn perDay into a peak rate.
func meanRate() float64 {
	sum := 0.0
	for m := 0; m < 7*24*60; m++ {
		sum += rate(float64(m) * 60)
	}
	return sum / (7 * 24 * 60)
}

func pick(r *rand.Rand, ws []float64) int {
	total := 0.0
	for _, w := range ws {
		total += w
	}
	x := r.Float64() * total
	for i, w := range ws {
		if x < w {
			return i
		}
		x -= w
	}
	return len(ws) - 1
}

func generate(sp spec) []byte {
	r := rand.New(rand.NewPCG(sp.seed, sp.seed^0x9e3779b97f4a7c15))
	var b bytes.Buffer
	fmt.Fprintln(&b, "submit,user,group,gpu_kind,gpu_type,count,hours,priority,preemptible")
	peak := sp.perDay / 86400 / meanRate() // arrivals per second at rate 1
	mixW := make([]float64, len(sp.mix))
	for i, c := range sp.mix {
		mixW[i] = c.weight
	}
	groupW := make([]float64, len(sp.groups))
	userW := make([][]float64, len(sp.groups))
	first := make([]int, len(sp.groups))
	n := 0
	for i, g := range sp.groups {
		groupW[i] = g.weight
		first[i] = n + 1
		n += g.users
		for k := 1; k <= g.users; k++ {
			userW[i] = append(userW[i], math.Pow(float64(k), -sp.zipf))
		}
	}
	end := float64(sp.days * 86400)
	type row struct {
		t    int
		line string
	}
	var rows []row
	for t := 0.0; ; {
		t += r.ExpFloat64() / peak // a Poisson process at the peak rate, thinned
		if t >= end {
			break
		}
		if r.Float64() >= rate(t) {
			continue
		}
		gi := pick(r, groupW)
		g := sp.groups[gi]
		user := fmt.Sprintf("u%02d", first[gi]+pick(r, userW[gi]))
		c := sp.mix[pick(r, mixW)]
		h := math.Exp(math.Log(sp.median) + sp.sigma*r.NormFloat64())
		h = math.Max(sp.minH, math.Min(sp.maxH, math.Round(h*4)/4))
		pre := r.Float64() < g.preemptible
		rows = append(rows, row{int(t), fmt.Sprintf("%d,%s,%s,%s,%s,1,%g,%d,%t", int(t), user, g.name, c.kind, c.typ, h, g.priority, pre)})
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].t < rows[j].t })
	for _, x := range rows {
		fmt.Fprintln(&b, x.line)
	}
	return b.Bytes()
}

func main() {
	out := flag.String("out", "test/traces", "directory to write the traces to")
	flag.Parse()
	for _, sp := range specs {
		path := filepath.Join(*out, sp.file)
		if err := os.WriteFile(path, generate(sp), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", path)
	}
}
