package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const simCluster = `host "lab" {
  preset = "a100x4"
  mode   = "mig"
}
`

const simTrace = `submit,user,group,gpu_kind,gpu_type,count,hours,priority,preemptible
0,u1,students,mig,1g.5gb,1,2,0,true
60,u2,staff,mig,7g.40gb,1,1,50,false
120,u3,students,mig,3g.20gb,1,3,0,false
180,u1,students,mig,2g.10gb,1,1,0,true
`

func TestSimUsage(t *testing.T) {
	cluster := writeTemp(t, "c.hcl", simCluster)
	trace := writeTemp(t, "t.csv", simTrace)
	cases := map[string][]string{
		"needs --cluster":        {"sim", "--trace", trace},
		"is not first-fit":       {"sim", "--cluster", cluster, "--trace", trace, "--runs", "lottery"},
		"modifier \"turbo\"":     {"sim", "--cluster", cluster, "--trace", trace, "--runs", "fifo+turbo"},
		"no such file":           {"sim", "--cluster", "/nonexistent.hcl", "--trace", trace},
		"--tick":                 {"sim", "--cluster", cluster, "--trace", trace, "--tick", "0s"},
		"takes no arguments":     {"sim", "extra", "--cluster", cluster, "--trace", trace},
		"invalid argument \"x\"": {"sim", "--cluster", cluster, "--trace", trace, "--max-wait", "x"},
		"--task-run \"50\"":      {"sim", "--cluster", cluster, "--trace", trace, "--as-tasks", "--task-run", "50"},
		"--task-run \"0-100\"":   {"sim", "--cluster", cluster, "--trace", trace, "--as-tasks", "--task-run", "0-100"},
		"--task-run \"80-40\"":   {"sim", "--cluster", cluster, "--trace", trace, "--as-tasks", "--task-run", "80-40"},
	}
	for want, args := range cases {
		_, errOut, code := runCLI(t, args...)
		if code != exitUsage || !strings.Contains(errOut, want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", args, code, errOut, want)
		}
	}
}

func TestSimBadInput(t *testing.T) {
	cluster := writeTemp(t, "c.hcl", simCluster)
	bad := writeTemp(t, "bad.hcl", "host \"x\" {\n  preset = \"dgx\"\n}\n")
	_, errOut, code := runCLI(t, "sim", "--cluster", bad, "--trace", writeTemp(t, "t.csv", simTrace))
	if code != exitFailure || !strings.Contains(errOut, "bad.hcl:1: host \"x\": unknown preset \"dgx\"") {
		t.Errorf("bad cluster: exit %d, %q", code, errOut)
	}
	trace := writeTemp(t, "t.csv", simTrace+"240,u4,students,mig,5g.1tb,1,1,0,false\n300,u5,students,mig,1g.5gb,1,lots,0,false\n")
	_, errOut, code = runCLI(t, "sim", "--cluster", cluster, "--trace", trace)
	if code != exitFailure || !strings.Contains(errOut, "2 bad rows") || !strings.Contains(errOut, "line 6:") || !strings.Contains(errOut, "line 7: hours") {
		t.Errorf("bad rows: exit %d, %q", code, errOut)
	}
	out, errOut, code := runCLI(t, "sim", "--cluster", cluster, "--trace", trace, "--skip-bad-rows")
	if code != 0 || !strings.Contains(out, "Skipped 2 bad rows (first: line 6:") {
		t.Errorf("--skip-bad-rows: exit %d, %q %q", code, out, errOut)
	}
}

func TestSimReport(t *testing.T) {
	cluster := writeTemp(t, "c.hcl", simCluster)
	trace := writeTemp(t, "t.csv", simTrace)
	out, errOut, code := runCLI(t, "sim", "--cluster", cluster, "--trace", trace)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"first-fit", "fifo", "priority", "sjf", "fairshare", "of which 7g.40gb", "By type, largest first", "fairshare vs first-fit"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	out, errOut, code = runCLI(t, "sim", "--cluster", cluster, "--trace", trace, "--json", "--runs", "first-fit,fairshare+no-preempt,fifo+greedy")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Largest string `json:"largest"`
		Runs    []struct {
			Name     string `json:"name"`
			Accepted int    `json:"accepted"`
			Reserve  int    `json:"reserve"`
			Preempt  bool   `json:"preempt"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 3 || rep.Runs[0].Name != "first-fit" || rep.Runs[1].Name != "fairshare+no-preempt" || rep.Runs[1].Preempt || rep.Runs[2].Reserve != 0 || rep.Largest != "7g.40gb" {
		t.Errorf("JSON runs %+v", rep)
	}
}

// TestSimWithConfig replays profile requests under the lab configuration:
// its queue order is the one marked, and the outsider is refused by quota.
func TestSimWithConfig(t *testing.T) {
	cluster := writeTemp(t, "c.hcl", simCluster)
	trace := writeTemp(t, "t.csv", "submit,user,group,profile,hours\n0,sam,students,student,2\n10,olga,visitors,student,1\n20,tom,staff,staff,4\n")
	out, errOut, code := runCLI(t, "sim", "--cluster", cluster, "--trace", trace, "--config", "../../configs/lab")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "priority*") || !strings.Contains(out, "quota 1") {
		t.Errorf("report:\n%s", out)
	}
	_, errOut, code = runCLI(t, "sim", "--cluster", cluster, "--trace", trace)
	if code != exitFailure || !strings.Contains(errOut, "needs the configuration (--config)") {
		t.Errorf("profile column without --config: exit %d, %q", code, errOut)
	}
}

// gpuvm sim --as-tasks: each run as VMs and as tasks, side by side; with
// the whole run (100-100) the tasks give back only what the VMs do.
func TestSimAsTasks(t *testing.T) {
	cluster := writeTemp(t, "c.hcl", simCluster)
	trace := writeTemp(t, "t.csv", simTrace)
	out, errOut, code := runCLI(t, "sim", "--cluster", cluster, "--trace", trace, "--as-tasks", "--runs", "first-fit,fifo")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"drawn from 20–100 % of it (seed 1)", "VMs → tasks", "GPU-h given back early", "7g.40gb accepted", "first-fit", "fifo"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	out, errOut, code = runCLI(t, "sim", "--cluster", cluster, "--trace", trace, "--as-tasks", "--task-run", "50-50", "--task-seed", "3", "--runs", "fifo", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Draw struct {
			Seed     uint64
			Min, Max float64
		}
		Runs []struct {
			Run        string
			VMs, Tasks struct {
				Granted  float64 `json:"granted_gpu_hours"`
				Used     float64 `json:"used_gpu_hours"`
				GaveBack float64 `json:"given_back_gpu_hours"`
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Draw.Seed != 3 || rep.Draw.Min != 0.5 || len(rep.Runs) != 1 || rep.Runs[0].Run != "fifo" {
		t.Fatalf("report %+v", rep)
	}
	v, k := rep.Runs[0].VMs, rep.Runs[0].Tasks
	// Every request starts at once on the empty A100s: the tasks use half.
	if v.GaveBack != 0 || v.Granted == 0 || k.Granted != v.Granted || math.Abs(k.Used-v.Granted/2) > 0.01 || math.Abs(k.GaveBack-v.Granted/2) > 0.01 {
		t.Errorf("VMs %+v, tasks %+v", v, k)
	}
}
