package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func TestAdminAlerts(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})

	if out := admin.must("admin", "alerts"); out != "No alerts.\n" {
		t.Errorf("no alerts: %q", out)
	}
	ctx := context.Background()
	var ids []int64
	for _, subj := range []string{"h1/0000:41:00.0", "queue", "backend/mig"} {
		a := &store.Alert{Rule: "hot", Subject: subj, Host: "h1", Metric: "gpu_temperature", Value: 91, Summary: "GPU 0000:41:00.0 on h1: gpu_temperature is 91 °C, above 85 °C"}
		if _, err := env.Store.FireAlert(ctx, a); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, a.ID)
	}
	if _, err := env.Store.ResolveAlert(ctx, "hot", "queue", 3, "back to 3", time.Now()); err != nil {
		t.Fatal(err)
	}
	out := admin.must("admin", "alerts")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[0], "SUMMARY") ||
		!strings.Contains(lines[1], "backend/mig") || !strings.Contains(lines[2], "resolved") || !strings.Contains(lines[3], "91 °C") {
		t.Errorf("table:\n%s", out)
	}
	var l api.AlertList
	decodeStrict(t, admin.must("admin", "alerts", "--state", "firing", "--json"), &l)
	if len(l.Items) != 2 || l.Items[0].Subject != "backend/mig" || l.Items[1].State != api.AlertFiring {
		t.Errorf("--state firing --json: %+v", l)
	}
	if out := admin.must("admin", "alerts", "-q", "--limit", "1", "--all"); out != "3\n2\n1\n" {
		t.Errorf("-q --all --limit 1: %q (ids %v)", out, ids)
	}
	out, errOut, code := admin.run("admin", "alerts", "--limit", "1")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(errOut, "--all") {
		t.Errorf("one page: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := admin.run("admin", "alerts", "--state", "pending"); code != 2 || !strings.Contains(errOut, "--state is firing or resolved") {
		t.Errorf("bad state: exit %d %q", code, errOut)
	}
	if _, errOut, code := admin.run("admin", "alerts", "--limit", "0"); code != 2 || !strings.Contains(errOut, "--limit") {
		t.Errorf("bad limit: exit %d %q", code, errOut)
	}
	if _, errOut, code := ann.run("admin", "alerts"); code != 1 || !strings.Contains(errOut, "this needs an admin") {
		t.Errorf("as a user: exit %d %q", code, errOut)
	}
}
