package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuvm/gpuvm/pkg/monitor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func metricsServer(t *testing.T, auth string) (*adminEnv, *Server) {
	t.Helper()
	e := newAdminEnv(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := newServer(t, Deps{Auth: e.st, Backends: fakeBackends{}, Store: e.st, Host: "h1", Log: log,
		Metrics: monitor.NewExporter("h1", nil, e.st, nil, log), MetricsAuth: auth})
	return e, s
}

func getMetrics(t *testing.T, s *Server, token string) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != 200 {
		return rec.Code, nil
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return rec.Code, fams
}

// Requests are counted by route template, never by path.
func TestMetricsRoute(t *testing.T) {
	e, s := metricsServer(t, MetricsAuthNone)
	ctx := context.Background()
	if _, err := e.st.CreateVM(ctx, &store.VM{Name: "v", Owner: "ann", Profile: "p", Hours: 1}, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/v1/vms/abc", "/v1/vms/def", "/v1/nothing/here"} {
		send(t, s, "GET", p, e.ann, "")
	}
	code, fams := getMetrics(t, s, "")
	if code != 200 {
		t.Fatalf("GET /metrics without a token: %d", code)
	}
	routes := map[string]float64{}
	for _, m := range fams["gpuvm_api_requests_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.Label {
			l[p.GetName()] = p.GetValue()
		}
		routes[l["method"]+" "+l["route"]+" "+l["code"]] += m.Counter.GetValue()
	}
	if routes["GET /v1/vms/:id 404"] != 2 || routes["GET unmatched 404"] != 1 {
		t.Errorf("requests by route %v", routes)
	}
	for r := range routes {
		if strings.Contains(r, "abc") || strings.Contains(r, "/v1/nothing") {
			t.Errorf("a path became a label: %q", r)
		}
	}
	if f := fams["gpuvm_vms"]; f == nil || f.Metric[0].Gauge.GetValue() != 1 {
		t.Errorf("gpuvm_vms %v", f)
	}
	if f := fams["gpuvm_queue_length"]; f == nil || f.Metric[0].Gauge.GetValue() != 1 {
		t.Errorf("gpuvm_queue_length %v", f)
	}
}

func TestMetricsAuth(t *testing.T) {
	e, s := metricsServer(t, MetricsAuthToken)
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", 401},
		{"bad token", "nope", 401},
		{"a user's token", e.ann, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, _ := getMetrics(t, s, tc.token); code != tc.want {
				t.Errorf("status %d, want %d", code, tc.want)
			}
		})
	}
	// Without an exporter the route says so.
	plain := testServer(t, nil)
	rec, body := do(t, plain, "GET", "/metrics", "")
	if rec.Code != 503 || body["type"] != ProblemBase+"unavailable" {
		t.Errorf("no exporter: %d %v", rec.Code, body)
	}
}
