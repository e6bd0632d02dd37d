package monitor

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
)

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section is the text of a "## title" section of a document.
func section(t *testing.T, doc, title string) string {
	t.Helper()
	i := strings.Index(doc, "\n## "+title+"\n")
	if i < 0 {
		t.Fatalf("docs/metrics.md has no section %q", title)
	}
	body := doc[i+len(title)+4:]
	if j := strings.Index(body, "\n## "); j >= 0 {
		body = body[:j]
	}
	return body
}

var metricRow = regexp.MustCompile("(?m)^\\| `(gpuvm_[a-z_]+)` \\| ([a-z]+) \\|([a-z, ]*)\\|")

// Every metric is documented with its type and labels, and every metric
// the page documents exists.
func TestMetricsDocumented(t *testing.T) {
	body := section(t, readDoc(t), "Metrics")
	documented := map[string][]string{}
	for _, m := range metricRow.FindAllStringSubmatch(body, -1) {
		if _, dup := documented[m[1]]; dup {
			t.Errorf("docs/metrics.md documents %s twice", m[1])
		}
		documented[m[1]] = []string{m[2], strings.TrimSpace(m[3])}
	}
	for _, d := range MetricDefs {
		doc, ok := documented[d.Name]
		if !ok {
			t.Errorf("metric %s is not documented in docs/metrics.md", d.Name)
			continue
		}
		if doc[0] != string(d.Kind) {
			t.Errorf("docs/metrics.md says %s is a %s; it is a %s", d.Name, doc[0], d.Kind)
		}
		if want := strings.Join(d.Labels, ", "); doc[1] != want {
			t.Errorf("docs/metrics.md gives %s the labels %q; they are %q", d.Name, doc[1], want)
		}
		delete(documented, d.Name)
	}
	for name := range documented {
		t.Errorf("docs/metrics.md documents %s, which does not exist", name)
	}
	if len(MetricDefs) < 30 {
		t.Errorf("only %d metrics defined", len(MetricDefs))
	}
}

// The webhook body's fields are the ones documented.
func TestWebhookBodyDocumented(t *testing.T) {
	body := section(t, readDoc(t), "Alerts")
	i := strings.Index(body, "| field | type | meaning |")
	if i < 0 {
		t.Fatal("docs/metrics.md, Alerts: no table of the webhook body")
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(body[i:], -1) {
		documented[m[1]] = true
	}
	typ := reflect.TypeOf(api.AlertNotification{})
	for k := 0; k < typ.NumField(); k++ {
		tag := strings.Split(typ.Field(k).Tag.Get("json"), ",")[0]
		if !documented[tag] {
			t.Errorf("api.AlertNotification.%s (%q) is not documented", typ.Field(k).Name, tag)
		}
		delete(documented, tag)
	}
	for f := range documented {
		t.Errorf("docs/metrics.md documents webhook field %q, which does not exist", f)
	}
	// And every alert metric has its row.
	table := section(t, readDoc(t), "Alerts")
	for _, m := range config.AlertMetrics {
		if !strings.Contains(table, "| `"+m+"` |") {
			t.Errorf("alert metric %s is not described in docs/metrics.md", m)
		}
	}
}

var promIdent = regexp.MustCompile(`\b((?:gpuvm|process|go)_[a-z_]+)\b`)

// The Grafana dashboard is valid JSON whose queries use only metrics that
// exist, and every panel has a query.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../../configs/grafana/gpuvm.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("configs/grafana/gpuvm.json: %v", err)
	}
	if dash.UID == "" || dash.Title == "" || len(dash.Panels) < 10 {
		t.Fatalf("dashboard %q (%q) has %d panels", dash.Title, dash.UID, len(dash.Panels))
	}
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
	}
	known := map[string]bool{"process_cpu_seconds_total": true}
	for _, d := range MetricDefs {
		known[d.Name] = true
		if d.Kind == Histogram {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				known[d.Name+s] = true
			}
		}
	}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
			for _, m := range promIdent.FindAllString(tg.Expr, -1) {
				if !known[m] {
					t.Errorf("panel %q queries %s, which gpuvmd does not export", p.Title, m)
				}
				used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")] = true
			}
			for _, v := range regexp.MustCompile(`\$\{?([a-z]+)`).FindAllStringSubmatch(tg.Expr, -1) {
				if !vars[v[1]] {
					t.Errorf("panel %q uses the variable $%s, which the dashboard does not define", p.Title, v[1])
				}
			}
		}
	}
	// The dashboard shows most of what is exported.
	var unused []string
	for _, d := range MetricDefs {
		if !used[d.Name] {
			unused = append(unused, d.Name)
		}
	}
	sort.Strings(unused)
	if len(unused) > 6 {
		t.Errorf("the dashboard leaves out %d metrics: %v", len(unused), unused)
	}
}
