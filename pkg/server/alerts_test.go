package server

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func TestListAlerts(t *testing.T) {
	e := newAdminEnv(t)
	ctx := context.Background()
	var ids []int64
	for _, subj := range []string{"h1/0000:41:00.0", "h1/0000:42:00.0", "queue"} {
		a := &store.Alert{Rule: "hot", Subject: subj, Host: "h1", Metric: "gpu_temperature", Value: 90, Summary: "90 °C"}
		if _, err := e.st.FireAlert(ctx, a); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, a.ID)
	}
	resolvedAt := e.clock.Now().Add(time.Minute)
	if _, err := e.st.ResolveAlert(ctx, "hot", "h1/0000:41:00.0", 70, "70 °C again", resolvedAt); err != nil {
		t.Fatal(err)
	}
	list := func(query string) api.AlertList {
		t.Helper()
		var l api.AlertList
		if code, body := e.call(t, "GET", "/v1/alerts"+query, e.admin, "", &l); code != 200 {
			t.Fatalf("GET /v1/alerts%s: %d %v", query, code, body)
		}
		return l
	}
	all := list("")
	if len(all.Items) != 3 || all.Items[0].ID != ids[2] || all.Items[2].ID != ids[0] || all.Next != "" {
		t.Fatalf("all alerts %+v", all)
	}
	r := all.Items[2]
	if r.State != api.AlertResolved || r.Value != 70 || r.Summary != "70 °C again" || r.ResolvedAt == nil || !r.ResolvedAt.Equal(resolvedAt) ||
		r.Rule != "hot" || r.Metric != "gpu_temperature" || r.Host != "h1" || r.StartedAt.IsZero() {
		t.Errorf("resolved alert %+v", r)
	}
	if f := list("?state=firing"); len(f.Items) != 2 || f.Items[0].State != api.AlertFiring {
		t.Errorf("firing %+v", f)
	}
	if f := list("?state=resolved&rule=hot"); len(f.Items) != 1 || f.Items[0].ID != ids[0] {
		t.Errorf("resolved %+v", f)
	}
	if f := list("?rule=cold"); len(f.Items) != 0 || f.Items == nil {
		t.Errorf("no alerts of rule cold: %+v", f)
	}
	// Pages.
	p1 := list("?limit=2")
	if len(p1.Items) != 2 || p1.Next != strconv.FormatInt(ids[1], 10) {
		t.Fatalf("first page %+v", p1)
	}
	p2 := list("?limit=2&after=" + p1.Next)
	if len(p2.Items) != 1 || p2.Items[0].ID != ids[0] || p2.Next != "" {
		t.Errorf("second page %+v", p2)
	}
	for _, tc := range []struct {
		name, query, token string
		status             int
		field              string
	}{
		{"bad state", "?state=pending", e.admin, 400, "state"},
		{"limit 0", "?limit=0", e.admin, 400, "limit"},
		{"limit too big", "?limit=501", e.admin, 400, "limit"},
		{"bad cursor", "?after=abc", e.admin, 400, "after"},
		{"not an admin", "", e.ann, 403, ""},
		{"no token", "", "", 401, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.call(t, "GET", "/v1/alerts"+tc.query, tc.token, "", nil)
			if code != tc.status {
				t.Fatalf("%d %v", code, body)
			}
			if tc.field != "" && body["field"] != tc.field {
				t.Errorf("field %v, want %s", body["field"], tc.field)
			}
		})
	}
}
