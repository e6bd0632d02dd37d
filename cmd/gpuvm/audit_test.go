package main

import (
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

func TestAudit(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})

	if out := ann.must("audit"); out != "No audit entries.\n" {
		t.Errorf("empty: %q", out)
	}
	ann.must("create", "seat", "--name", "box", "--hours", "1")
	if _, _, code := ann.run("create", "nope"); code != 1 {
		t.Fatalf("unknown profile: exit %d", code)
	}
	admin.must("admin", "users", "create", "carl")

	out := admin.must("admin", "audit")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "TIME ") || !strings.Contains(lines[0], "OUTCOME") ||
		!strings.Contains(lines[1], "user.create") || !strings.Contains(lines[1], "user/carl") || !strings.Contains(lines[1], "ok 201") ||
		!strings.Contains(lines[2], "refused 4") || !strings.Contains(lines[3], "vm/ann/box") || !strings.Contains(lines[3], "ok 202") {
		t.Errorf("table:\n%s", out)
	}
	var l api.AuditList
	decodeStrict(t, admin.must("admin", "audit", "--json"), &l)
	if len(l.Items) != 3 || l.Next != "" || l.Items[2].Action != "vm.create" || l.Items[2].User != "ann" || l.Items[2].TokenID == 0 || l.Items[2].VMID == "" {
		t.Errorf("--json: %+v", l)
	}
	decodeStrict(t, admin.must("admin", "audit", "--user", "ann", "--action", "vm.create", "--since", "1h", "--json"), &l)
	if len(l.Items) != 2 {
		t.Errorf("--user ann --action vm.create: %+v", l)
	}
	decodeStrict(t, admin.must("admin", "audit", "--vm", l.Items[1].VMID, "--json"), &l)
	if len(l.Items) != 1 || l.Items[0].Target != "vm/ann/box" {
		t.Errorf("--vm: %+v", l)
	}
	if out := admin.must("admin", "audit", "--until", "1h"); out != "No audit entries.\n" {
		t.Errorf("--until an hour ago: %q", out)
	}
	// Users see their own entries only.
	decodeStrict(t, ann.must("audit", "--json"), &l)
	if len(l.Items) != 2 || l.Items[0].User != "ann" || l.Items[1].User != "ann" {
		t.Errorf("ann's: %+v", l)
	}
	decodeStrict(t, ann.must("audit", "--vm", "box", "--json"), &l)
	if len(l.Items) != 1 || l.Items[0].Action != "vm.create" {
		t.Errorf("ann's --vm box: %+v", l)
	}
	// --limit: what is printed, and a word when there is more.
	out, errOut, code := admin.run("admin", "audit", "--limit", "2")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(errOut, "More entries") {
		t.Errorf("--limit 2: exit %d\n%s%s", code, out, errOut)
	}
	decodeStrict(t, admin.must("admin", "audit", "--limit", "1", "--json"), &l)
	if len(l.Items) != 1 || l.Next == "" {
		t.Errorf("--limit 1 --json: %+v", l)
	}

	for _, tc := range []struct {
		name string
		c    *cli
		args []string
		code int
		msg  string
	}{
		{"limit 0", admin, []string{"admin", "audit", "--limit", "0"}, 2, "--limit is from 1 to 10000"},
		{"limit too big", ann, []string{"audit", "--limit", "10001"}, 2, "--limit"},
		{"bad time", admin, []string{"admin", "audit", "--since", "soon"}, 2, `--since "soon"`},
		{"until before since", ann, []string{"audit", "--since", "1h", "--until", "2h"}, 2, "is not after --since"},
		{"no --user for one's own", ann, []string{"audit", "--user", "bob"}, 2, "unknown flag"},
		{"arguments", ann, []string{"audit", "box"}, 2, "takes no arguments"},
		{"unknown action", admin, []string{"admin", "audit", "--action", "vm.fly"}, 1, `unknown action "vm.fly"`},
		{"a user on the admin log", ann, []string{"admin", "audit"}, 1, "this needs an admin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := tc.c.run(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.msg) {
				t.Errorf("exit %d %q; want %d and %q", code, errOut, tc.code, tc.msg)
			}
		})
	}
}
