package server

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
)

// rulesPolicy has a rule for artists (ann's group) and one for staff, whom
// ann must not see.
const rulesPolicy = `
policy {
  timezone = "Asia/Shanghai"
  queue { order = "priority" }
  defaults {
    quota { vms = 1 }
  }
  group "artists" {
    quota {
      vms                = 2
      gpu_hours_per_week = 30
    }
  }
  group "staff" {
    priority = 100
  }
  window "night" {
    days    = "daily"
    hours   = "20:00-08:00"
    classes = ["batch"]
  }
  alert "hot" {
    metric  = "gpu_temperature"
    above   = 85
    webhook = "https://alerts.example.com/x"
  }
}
profile "open" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
profile "staff-only" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  groups = ["staff"]
}
`

func rulesServer(t *testing.T) *Server {
	t.Helper()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(rulesPolicy)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return testServer(t, &fakeConfig{cfg: cfg})
}

func getRules(t *testing.T, s *Server, path, token string, header map[string]string) (*httptest.ResponseRecorder, api.Rules) {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var doc api.Rules
	if rec.Code == 200 {
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return rec, doc
}

func rulesText(doc api.Rules) string {
	var b strings.Builder
	for _, s := range doc.Sections {
		for _, st := range s.Sentences {
			b.WriteString(st.Text + "\n")
		}
	}
	return b.String()
}

func TestRules(t *testing.T) {
	s := rulesServer(t)
	cases := []struct {
		name, path, token string
		header            map[string]string
		lang, scope       string
		has, hasNot       []string
	}{
		{"user, English by default", "/v1/rules", "ann-token", nil, "en", api.RulesScopeUser,
			[]string{"Members of group “artists” may hold at most 2 VMs at once, and use at most 30 GPU-hours a week.",
				"Window “night”, every day, 20:00 to 08:00 the next day (Asia/Shanghai time): only batch VMs may start.",
				"Waiting VMs start by priority, highest first"},
			[]string{"staff", "hot", "alerts.example.com"}},
		{"user, Chinese by Accept-Language", "/v1/rules", "ann-token", map[string]string{"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"}, "zh-CN", api.RulesScopeUser,
			[]string{"“artists”组的成员同时最多可占用 2 台虚拟机，GPU 用量上限为每周 30 GPU 小时。",
				"窗口“night”，每天 20:00 至次日 08:00（Asia/Shanghai 时间）：只有批处理虚拟机可以启动。"},
			[]string{"staff", "hot"}},
		{"lang beats Accept-Language", "/v1/rules?lang=en", "ann-token", map[string]string{"Accept-Language": "zh-CN"}, "en", api.RulesScopeUser,
			[]string{"Everyone may use “open”."}, nil},
		{"admin sees every rule", "/v1/rules?lang=en", "admin-token", nil, "en", api.RulesScopeAll,
			[]string{"The VMs of members of group “staff” have priority 100.", "Only members of group “staff” may use “staff-only”.",
				"Alert “hot” fires when gpu_temperature is above 85 for 5 minutes, and is posted to alerts.example.com."}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec, doc := getRules(t, s, c.path, c.token, c.header)
			if rec.Code != 200 {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			if doc.Lang != c.lang || rec.Header().Get("Content-Language") != c.lang || doc.Scope != c.scope {
				t.Errorf("lang %q (Content-Language %q), scope %q; want %q, %q", doc.Lang, rec.Header().Get("Content-Language"), doc.Scope, c.lang, c.scope)
			}
			text := rulesText(doc)
			for _, h := range c.has {
				if !strings.Contains(text, h) {
					t.Errorf("missing %q in:\n%s", h, text)
				}
			}
			for _, h := range c.hasNot {
				if strings.Contains(text, h) {
					t.Errorf("%q shown to a user:\n%s", h, text)
				}
			}
		})
	}
	_, doc := getRules(t, s, "/v1/rules", "ann-token", nil)
	if y := doc.You; y.User != "ann" || y.LimitsFrom != api.LimitsFromGroups || len(y.Quota) != 2 || *y.Quota[0].Number != 2 || y.Quota[0].Field != "quota.vms" {
		t.Errorf("you: %+v", y)
	}
}

func TestRulesRefusals(t *testing.T) {
	s := rulesServer(t)
	rec, body := do(t, s, "GET", "/v1/rules?lang=fr", "ann-token")
	if rec.Code != 422 || body["field"] != "lang" || !strings.Contains(body["detail"].(string), `"fr"`) {
		t.Errorf("lang=fr: %d %v", rec.Code, body)
	}
	if rec, _ := do(t, s, "GET", "/v1/rules", ""); rec.Code != 401 {
		t.Errorf("no token: %d", rec.Code)
	}
	bare := testServer(t, nil)
	bare.Config = nil // gpuvmd without --config
	if rec, body := do(t, bare, "GET", "/v1/rules", "ann-token"); rec.Code != 503 {
		t.Errorf("no configuration: %d %v", rec.Code, body)
	}
}
