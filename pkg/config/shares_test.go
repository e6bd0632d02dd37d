package config

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func TestShareBlocks(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		err, warn  string // a diagnostic's summary; "" for none
		line       int    // the line it points at (server.hcl; the storage block starts at 3)
	}{
		{"one share", "share \"data\" {\n path = \"/srv/data\"\n read_only = [\"group:students\"]\n}", "", "", 0},
		{"nobody", "share \"data\" {\n path = \"/srv/data\"\n}", "", "Nobody may mount the share", 4},
		{"traversal name", "share \"../etc\" {\n path = \"/srv/data\"\n read_only = [\"user:a\"]\n}", "Invalid share name", "", 4},
		{"unicode name", "share \"dätä\" {\n path = \"/srv/data\"\n read_only = [\"user:a\"]\n}", "Invalid share name", "", 4},
		{"long name", "share \"" + strings.Repeat("a", 300) + "\" {\n path = \"/srv/data\"\n read_only = [\"user:a\"]\n}", "Invalid share name", "", 4},
		{"relative path", "share \"d\" {\n path = \"srv/data\"\n read_only = [\"user:a\"]\n}", "Invalid path", "", 5},
		{"root path", "share \"d\" {\n\n path = \"/\"\n read_only = [\"user:a\"]\n}", "Invalid path", "", 6},
		{"dotdot path", "share \"d\" {\n path = \"/srv/../etc\"\n read_only = [\"user:a\"]\n}", "Invalid path", "", 5},
		{"nul path", "share \"d\" {\n path = \"/srv/a\\u0000b\"\n read_only = [\"user:a\"]\n}", "Invalid path", "", 5},
		{"no path", "share \"d\" {\n read_only = [\"user:a\"]\n}", "Missing required argument", "", 4},
		{"relative mount", "share \"d\" {\n path = \"/srv/d\"\n mount = \"d\"\n read_only = [\"user:a\"]\n}", "Invalid mount", "", 6},
		{"mount in etc", "share \"d\" {\n path = \"/srv/d\"\n mount = \"/etc/d\"\n read_only = [\"user:a\"]\n}", "Invalid mount", "", 6},
		{"mount under home", "homes {}\nshare \"d\" {\n path = \"/srv/d\"\n mount = \"/gpuvm/home/d\"\n read_only = [\"user:a\"]\n}", "Invalid mount", "", 5},
		{"mount under another", "share \"a\" {\n path = \"/srv/a\"\n read_only = [\"user:a\"]\n}\nshare \"b\" {\n path = \"/srv/b\"\n mount = \"/gpuvm/shares/a/b\"\n read_only = [\"user:a\"]\n}", "Invalid mount", "", 8},
		{"bad principal", "share \"d\" {\n path = \"/srv/d\"\n read_write = [\"ann\"]\n}", "Invalid principal", "", 6},
		{"bad principal name", "share \"d\" {\n path = \"/srv/d\"\n read_write = [\"user:\"]\n}", "Invalid principal", "", 6},
		{"principal in both", "share \"d\" {\n path = \"/srv/d\"\n read_write = [\"group:ml\"]\n read_only = [\"group:ml\"]\n}", "Principal in both lists", "", 7},
		{"duplicate principal", "share \"d\" {\n path = \"/srv/d\"\n read_only = [\"user:a\",\n \"user:a\"]\n}", "Duplicate principal", "", 7},
		{"zero quota", "share \"d\" {\n path = \"/srv/d\"\n read_only = [\"user:a\"]\n quota = \"0GiB\"\n}", "Invalid quota", "", 7},
		{"bad quota", "share \"d\" {\n path = \"/srv/d\"\n read_only = [\"user:a\"]\n quota = \"lots\"\n}", "Invalid size", "", 7},
		{"duplicate share", "share \"d\" {\n path = \"/srv/d\"\n read_only = [\"user:a\"]\n}\nshare \"d\" {\n path = \"/srv/e\"\n read_only = [\"user:a\"]\n}", "Duplicate share", "", 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "server {\n state_dir = \"/srv/gpuvm\"\nstorage {\n" + tc.body + "\n}\n}\n"
			cfg, diags := Parse(Source{Name: "server.hcl", Data: []byte(src)})
			want := tc.err + tc.warn
			if want == "" {
				if len(diags) > 0 {
					t.Fatal(diags)
				}
				s := cfg.Server.Storage.Shares["data"]
				if s == nil || s.Path != "/srv/data" || s.Mount != "/gpuvm/shares/data" || s.Source != "server.hcl:4" {
					t.Errorf("share = %+v", s)
				}
				return
			}
			if tc.warn != "" && diags.HasErrors() {
				t.Fatal(diags)
			}
			var sums []string
			for _, d := range diags {
				sums = append(sums, d.Summary)
				if d.Summary != want {
					continue
				}
				if d.Subject == nil || d.Subject.Filename != "server.hcl" || d.Subject.Start.Line != tc.line {
					t.Errorf("diagnostic %q points at %v, want server.hcl:%d", d.Summary, d.Subject, tc.line)
				}
				return
			}
			t.Errorf("diagnostics %s; want %q", strings.Join(sums, "; "), want)
		})
	}
}

func TestShareAccessAndTag(t *testing.T) {
	s := &Share{Name: "team", ReadWrite: []string{"user:ann", "group:ml"}, ReadOnly: []string{"group:students", "user:bob"}}
	for _, tc := range []struct {
		user       string
		groups     []string
		mode, rule string
	}{
		{"ann", nil, ShareReadWrite, "read_write: user:ann"},
		{"bob", nil, ShareReadOnly, "read_only: user:bob"},
		{"bob", []string{"ml"}, ShareReadWrite, "read_write: group:ml"},
		{"cy", []string{"students"}, ShareReadOnly, "read_only: group:students"},
		{"cy", []string{"other"}, "", ""},
		{"group:ml", nil, "", ""},
	} {
		if m, r := s.Access(tc.user, tc.groups); m != tc.mode || r != tc.rule {
			t.Errorf("Access(%s, %v) = %q, %q; want %q, %q", tc.user, tc.groups, m, r, tc.mode, tc.rule)
		}
	}
	if got := ShareTag("team"); got != "gpuvm-share-team" {
		t.Errorf("ShareTag(team) = %q", got)
	}
	long := strings.Repeat("d", 63)
	a, b := ShareTag(long), ShareTag(long[:62]+"e")
	if len(a) != 36 || a == b || !strings.HasPrefix(a, "gpuvm-share-ddd") {
		t.Errorf("long tags %q and %q: want 36 bytes each, different", a, b)
	}
}

func TestProfileShares(t *testing.T) {
	const server = "server {\n storage {\n  share \"team\" {\n   path = \"/srv/team\"\n   read_write = [\"user:ann\", \"group:ml\"]\n  }\n }\n}\npolicy {\n group \"ml\" {}\n}\n"
	const profile = "profile \"p\" {\n boot {\n  kernel = \"/k\"\n }\n%s\n}\n"
	for _, tc := range []struct {
		name, body string
		err, warn  string
		line       int
	}{
		{"covered", " users = [\"ann\"]\n groups = [\"ml\"]\n shares = [\"team\"]", "", "", 0},
		{"unknown", " users = [\"ann\"]\n shares = [\"nope\"]", "Unknown share", "", 6},
		{"open profile", " shares = [\"team\"]", "", "Some of the profile's people may not mount the share", 5},
		{"user not named", " users = [\"ann\", \"bob\"]\n shares = [\"team\"]", "", "Some of the profile's people may not mount the share", 6},
		{"duplicate", " users = [\"ann\"]\n shares = [\"team\", \"team\"]", "Duplicate name", "", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, diags := Parse(Source{Name: "server.hcl", Data: []byte(server)},
				Source{Name: "profiles.hcl", Data: []byte(strings.Replace(profile, "%s", tc.body, 1))})
			want := tc.err + tc.warn
			if want == "" {
				if len(diags) > 0 {
					t.Fatal(diags)
				}
				if got := cfg.Profiles["p"].Shares; len(got) != 1 || got[0] != "team" {
					t.Errorf("shares = %v", got)
				}
				return
			}
			for _, d := range diags {
				if d.Summary == want {
					if d.Subject == nil || d.Subject.Filename != "profiles.hcl" || d.Subject.Start.Line != tc.line {
						t.Errorf("diagnostic %q points at %v, want profiles.hcl:%d", d.Summary, d.Subject, tc.line)
					}
					if tc.warn != "" && strings.Contains(d.Detail, "ann") && tc.name == "user not named" {
						t.Errorf("detail %q names ann, who is admitted", d.Detail)
					}
					return
				}
			}
			t.Errorf("diagnostics %v; want %q", diags, want)
		})
	}
}

// A share's quota, and the project it counts on: 2^31 and above, stable,
// one per name.
func TestShareQuota(t *testing.T) {
	src := "server {\n storage {\n  share \"data\" {\n   path = \"/srv/data\"\n   read_only = [\"group:s\"]\n   quota = \"500GiB\"\n  }\n }\n}\n"
	cfg, diags := Parse(Source{Name: "server.hcl", Data: []byte(src)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if q := cfg.Server.Storage.Shares["data"].Quota; q == nil || *q != 500<<30 {
		t.Errorf("quota %v, want 500GiB", q)
	}
	seen := map[uint32]string{}
	for _, n := range []string{"data", "datasets", "ml101-data", "team-data", "assets", "a"} {
		p := ShareProject(n)
		if p < 1<<31 || ShareProject(n) != p {
			t.Errorf("ShareProject(%q) = %d: want 2^31 or more, the same each time", n, p)
		}
		if other, ok := seen[p]; ok {
			t.Errorf("%q and %q have one project, %d", n, other, p)
		}
		seen[p] = n
	}
}

// Two shares with quotas whose names give one project are refused, at the
// second, naming both; without a quota on one of them they are not.
func TestShareProjectsCollide(t *testing.T) {
	byProject := map[uint32]string{}
	var a, b string
	for i := 0; a == ""; i++ {
		n := fmt.Sprintf("s%d", i)
		if other, ok := byProject[ShareProject(n)]; ok {
			a, b = other, n
		}
		byProject[ShareProject(n)] = n
	}
	share := func(name, quota string) string {
		q := ""
		if quota != "" {
			q = "   quota = \"" + quota + "\"\n"
		}
		return "  share \"" + name + "\" {\n   path = \"/srv/" + name + "\"\n   read_only = [\"group:s\"]\n" + q + "  }\n"
	}
	src := "server {\n storage {\n" + share(a, "1GiB") + share(b, "2GiB") + " }\n}\n"
	_, diags := Parse(Source{Name: "server.hcl", Data: []byte(src)})
	if !diags.HasErrors() || !strings.Contains(diags.Error(), "one filesystem project") ||
		!strings.Contains(diags.Error(), strconv.Quote(a)) || !strings.Contains(diags.Error(), strconv.Quote(b)) {
		t.Fatalf("shares %q and %q on project %d: %v", a, b, ShareProject(a), diags)
	}
	if d := diags[0]; d.Subject == nil || d.Subject.Start.Line != 8 {
		t.Errorf("the error is at %v, want the second share's label, line 8", d.Subject)
	}
	src = "server {\n storage {\n" + share(a, "1GiB") + share(b, "") + " }\n}\n"
	if _, diags := Parse(Source{Name: "server.hcl", Data: []byte(src)}); diags.HasErrors() {
		t.Errorf("one of them without a quota: %v", diags)
	}
}
