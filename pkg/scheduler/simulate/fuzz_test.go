package simulate

import (
	"strings"
	"testing"
)

// FuzzParseTrace: no input makes the trace reader panic; what it accepts
// has sorted, valid requests.
func FuzzParseTrace(f *testing.F) {
	f.Add(goodHeader + "0,u1,g,mig,3g.40gb,1,2,0,false\n")
	f.Add(goodHeader + "2026-01-05T01:00:00Z,u1,,vgpu,L40S-12Q,1,1,0,true\n")
	f.Add("submit,user,hours,gpu_kind,gpu_type,runtime\n1e9,u,0.1,any,20GiB,0.05\n")
	f.Add("submit,user,hours,gpu_kind\n\"unterminated,u,1,mig\n")
	f.Fuzz(func(t *testing.T, src string) {
		tr, err := ParseTrace(strings.NewReader(src), TraceOptions{SkipBad: true})
		if err != nil {
			return
		}
		for i, it := range tr.Items {
			if err := it.Request.Need.Validate(); err != nil {
				t.Fatalf("accepted an invalid need: %v", err)
			}
			if it.Request.Lease <= 0 || it.Runtime > it.Request.Lease {
				t.Fatalf("lease %v runtime %v", it.Request.Lease, it.Runtime)
			}
			if i > 0 && it.Request.Submitted.Before(tr.Items[i-1].Request.Submitted) {
				t.Fatal("not sorted")
			}
		}
	})
}

// FuzzParseCluster: no input makes the cluster reader panic.
func FuzzParseCluster(f *testing.F) {
	f.Add("host \"a\" {\n  preset = \"h100x8\"\n  count = 2\n  mode = \"mig\"\n}\n")
	f.Add("host \"b\" {\n  gpu {\n    model = \"L40S\"\n    count = 4\n    mixed_size = true\n  }\n}\n")
	f.Add("host \"c\" {\n  gpu {\n    model = \"A100 PCIe 40GB\"\n    mig_layout = [\"3g.20gb\", \"3g.20gb\"]\n  }\n}\nbooking \"x\" {\n  user = \"u\"\n  gpu_kind = \"mig\"\n  gpu_type = \"3g.20gb\"\n  start = \"60\"\n  hours = 1\n}\n")
	f.Fuzz(func(t *testing.T, src string) {
		if c, err := ParseCluster("f.hcl", []byte(src)); err == nil && c.GPUCount() == 0 {
			t.Fatal("a cluster without GPUs accepted")
		}
	})
}
