package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/rules"
)

const rulesConfig = clienttest.Profiles + `
policy {
  timezone = "Europe/Paris"
  defaults {
    quota {
      vms    = 2
      slices = 1
    }
  }
  window "day" {
    days        = "mon-fri"
    hours       = "09:00-18:00"
    classes     = ["interactive"]
    at_end      = "warn"
    warn_before = "10m"
  }
}
`

func TestRulesCommand(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Profiles: rulesConfig})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})

	out := ann.must("rules", "--width", "60")
	for _, want := range []string{
		"How much you may run\n====================\n",
		"- Anyone without a rule of their own (or of one of their\n  groups) may hold at most 2 VMs and 1 slice at once.\n",
		"- Window “day”, Monday to Friday, 09:00 to 18:00\n  (Europe/Paris time): only interactive VMs may start;",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("gpuvm rules lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 60 {
			t.Errorf("line of %d columns, wider than --width 60: %q", n, line)
		}
	}

	zh := ann.must("rules", "--lang", "zh-CN", "--width", "40")
	if !strings.Contains(zh, "你可以用多少\n") || !strings.Contains(zh, "窗口“day”，周一至周五 09:00 至 18:00") {
		t.Errorf("gpuvm rules --lang zh-CN:\n%s", zh)
	}
	// Wide characters take two columns.
	for _, line := range strings.Split(zh, "\n") {
		w := 0
		for _, r := range line {
			if r >= 0x2e80 {
				w += 2
			} else {
				w++
			}
		}
		if w > 40 {
			t.Errorf("line of %d columns, wider than --width 40: %q", w, line)
		}
	}
	// The locale picks the language when --lang is not given.
	zhEnv := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken, "LANG": "zh_CN.UTF-8"})
	if got := zhEnv.must("rules"); !strings.Contains(got, "你可以用多少") {
		t.Errorf("LANG=zh_CN.UTF-8: not Chinese:\n%s", got)
	}

	var doc api.Rules
	if err := json.Unmarshal([]byte(ann.must("rules", "--json")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Lang != rules.English || doc.Scope != api.RulesScopeUser || doc.You.User != "ann" || doc.Timezone != "Europe/Paris" {
		t.Errorf("--json: %+v", doc)
	}
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	if err := json.Unmarshal([]byte(admin.must("rules", "--json")), &doc); err != nil || doc.Scope != api.RulesScopeAll {
		t.Errorf("admin --json: scope %q, %v", doc.Scope, err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rules", "--lang", "fr"}, `--lang "fr": give en or zh-CN`},
		{[]string{"rules", "--width", "-3"}, "--width -3"},
		{[]string{"rules", "extra"}, "takes no arguments"},
	} {
		_, errOut, code := ann.run(c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}
