package rules

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// now is a Wednesday in winter (Paris at UTC+1).
var now = time.Date(2026, 12, 2, 10, 30, 0, 0, time.UTC)

func load(t *testing.T, dir string) *config.Config {
	t.Helper()
	cfg, diags := config.Load(dir)
	if diags.HasErrors() {
		t.Fatalf("loading %s: %s", dir, diags.Error())
	}
	return cfg
}

var viewers = map[string]Viewer{
	"admin": {User: "root", Admin: true},
	"ann":   {User: "ann"},                                        // no group, no rule: the defaults
	"sam":   {User: "sam", Groups: []string{"students", "ml101"}}, // the most generous of two groups
	"ada":   {User: "ada", Groups: []string{"staff"}},             // her own user rule
}

// The rules of configs/dev and of testdata/full (every policy feature), for
// several viewers, in both languages, as text (what gpuvm rules prints) and
// JSON (what GET /v1/rules answers). go test -update rewrites them.
func TestGolden(t *testing.T) {
	cases := []struct{ name, dir, viewer string }{
		{"dev-admin", "../../configs/dev", "admin"},
		{"dev-ann", "../../configs/dev", "ann"},
		{"full-admin", "testdata/full", "admin"},
		{"full-sam", "testdata/full", "sam"},
		{"full-ada", "testdata/full", "ada"},
		{"full-ann", "testdata/full", "ann"},
	}
	for _, c := range cases {
		cfg := load(t, c.dir)
		for _, lang := range Languages {
			t.Run(c.name+"-"+lang, func(t *testing.T) {
				doc, err := Build(cfg, viewers[c.viewer], lang, now)
				if err != nil {
					t.Fatal(err)
				}
				js, err := json.MarshalIndent(doc, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				golden(t, filepath.Join("testdata", "golden", c.name+"."+lang+".txt"), []byte(Text(doc, 80)))
				golden(t, filepath.Join("testdata", "golden", c.name+"."+lang+".json"), append(js, '\n'))
			})
		}
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./pkg/rules -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what Build writes now (go test ./pkg/rules -update rewrites it); got:\n%s", path, got)
	}
}

// policyFields walks a type of the configuration and lists the paths of its
// fields as the configuration's JSON names them ("groups.quota.vms"):
// maps, slices and pointers are looked through, structs walked into.
func policyFields(prefix string, t reflect.Type, skip func(path string) bool) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Map || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeOf(time.Time{}) {
		return []string{prefix}
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		if skip(path) {
			continue
		}
		out = append(out, policyFields(path, f.Type, skip)...)
	}
	return out
}

// Every field of the policy block, and every field of a profile that is a
// rule of sharing, is written down when it is set: testdata/full sets each
// of them, and each must be a fact of some sentence of what an admin sees.
// The fields are found by walking the configuration's types, so that a new
// policy feature fails this test until the rules say it.
func TestEveryPolicyFieldIsWritten(t *testing.T) {
	cfg := load(t, "testdata/full")
	doc, err := Build(cfg, viewers["admin"], English, now)
	if err != nil {
		t.Fatal(err)
	}
	facts := map[string]bool{}
	subjects := map[string]bool{}
	for _, s := range doc.Sections {
		for _, st := range s.Sentences {
			subjects[st.Subject] = true
			for _, f := range st.Facts {
				facts[f.Field] = true
				// A number the sentence states is in its words.
				if f.Number != nil && f.Unit != api.UnitBytes && f.Unit != api.UnitSeconds && !strings.Contains(st.Text, number(*f.Number)) {
					t.Errorf("sentence %q states %s = %v but does not say %s", st.Text, f.Field, *f.Number, number(*f.Number))
				}
			}
		}
	}
	// Names are the blocks' labels: they are the sentences' subjects,
	// checked below, not facts.
	labels := func(p string) bool { return strings.HasSuffix(p, ".name") }
	fields := policyFields("", reflect.TypeOf(config.Policy{}), labels)
	// Of a profile, the lease (walked) and these fields are rules of
	// sharing; the rest (vCPUs, memory, disk, GPU, display, desktop,
	// cloud-init) is what the machine is, which the catalogue shows.
	fields = append(fields, policyFields("profile.lease", reflect.TypeOf(config.Lease{}), labels)...)
	fields = append(fields, "profile.users", "profile.groups", "profile.class", "profile.priority")
	// Of the server block, the threshold under which a GPU is idle.
	fields = append(fields, "server.monitor.idle_threshold")
	if len(fields) < 40 {
		t.Fatalf("only %d fields found: the walk is broken: %v", len(fields), fields)
	}
	for _, f := range fields {
		if !facts[f] {
			t.Errorf("policy field %s: no sentence states it (a fact with field %q); set it in testdata/full and write it down in pkg/rules", f, f)
		}
	}
	var want []string
	for _, g := range sortedKeys(cfg.Policy.Groups) {
		want = append(want, "group:"+g)
	}
	for _, u := range sortedKeys(cfg.Policy.Users) {
		want = append(want, "user:"+u)
	}
	for _, w := range cfg.Policy.Windows {
		want = append(want, "window:"+w.Name)
	}
	for _, a := range cfg.Policy.Alerts {
		want = append(want, "alert:"+a.Name)
	}
	want = append(want, "defaults")
	for _, s := range want {
		if !subjects[s] {
			t.Errorf("no sentence is about %s", s)
		}
	}
}

func allText(doc api.Rules) string {
	var b strings.Builder
	for _, s := range doc.Sections {
		b.WriteString(s.Title + "\n")
		for _, st := range s.Sentences {
			b.WriteString(st.Text + "\n")
		}
	}
	return b.String()
}

// A user sees the rules for everyone and their own: not other users' or
// groups' blocks, not the profiles they may not use, not alerts or webhook
// addresses.
func TestUserSeesOnlyTheirRules(t *testing.T) {
	cfg := load(t, "testdata/full")
	for _, lang := range Languages {
		doc, err := Build(cfg, viewers["sam"], lang, now)
		if err != nil {
			t.Fatal(err)
		}
		if doc.Scope != api.RulesScopeUser {
			t.Errorf("scope %q", doc.Scope)
		}
		text := allText(doc)
		for _, hidden := range []string{"staff", "ada", "train", "alerts.example.com", "hooks.example.com", "not-shown", "gpu-hot"} {
			if strings.Contains(text, hidden) {
				t.Errorf("%s: a user in students and ml101 is shown %q:\n%s", lang, hidden, text)
			}
		}
		for _, s := range doc.Sections {
			if s.ID == SectionAlerts {
				t.Errorf("%s: a user is shown the alerts section", lang)
			}
		}
		for _, seen := range []string{"students", "ml101", "ml101-lab", "desk"} {
			if !strings.Contains(text, seen) {
				t.Errorf("%s: %q is not written for a member of students and ml101:\n%s", lang, seen, text)
			}
		}
		y := doc.You
		if y.LimitsFrom != api.LimitsFromGroups || !slices.Equal(y.LimitGroups, []string{"ml101", "students"}) || y.Preemptible || !y.MayBook {
			t.Errorf("%s: you = %+v", lang, y)
		}
		// The most generous of students (1 VM, 10 GPU-hours a week) and
		// ml101 (2 VMs, 6 a day): 2 VMs, 2 slices, no weekly or daily
		// budget (one of the two has none, and no limit beats any); not
		// preemptible, as ml101 is not.
		want := []api.RulesFact{numFact("quota.vms", 2, api.UnitCount), numFact("quota.slices", 2, api.UnitCount)}
		if !reflect.DeepEqual(y.Quota, want) {
			t.Errorf("%s: quota %+v, want %+v", lang, y.Quota, want)
		}
		if !slices.Equal(y.Profiles, []string{"desk", "desk-big", "ml101-lab"}) {
			t.Errorf("%s: profiles %v", lang, y.Profiles)
		}
	}
}

// The windows' times: the spans as written in the policy's zone, and this
// week's occurrences as absolute times (Paris is UTC+1 in December).
func TestWindowTimes(t *testing.T) {
	cfg := load(t, "testdata/full")
	doc, err := Build(cfg, viewers["ann"], English, now)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*api.RulesWindow{}
	for _, s := range doc.Sections {
		for _, st := range s.Sentences {
			if st.Window != nil {
				got[st.Window.Name] = st.Window
			}
		}
	}
	day, weekend := got["day"], got["weekend"]
	if day == nil || weekend == nil || got["maintenance"] == nil {
		t.Fatalf("windows %v", got)
	}
	if day.Zone != "Europe/Paris" || len(day.Spans) != 5 || day.Spans[0] != (api.RulesSpan{StartDay: "mon", Start: "09:00", EndDay: "mon", End: "18:00"}) {
		t.Errorf("day: %+v", day)
	}
	if len(day.ThisWeek) != 5 || !day.ThisWeek[0].Start.Equal(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)) ||
		!day.ThisWeek[4].End.Equal(time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC)) {
		t.Errorf("day this week: %+v", day.ThisWeek)
	}
	// The weekend runs across the week's end: one span, one occurrence.
	if len(weekend.Spans) != 1 || weekend.Spans[0] != (api.RulesSpan{StartDay: "sat", Start: "00:00", EndDay: "mon", End: "06:00"}) {
		t.Errorf("weekend spans: %+v", weekend.Spans)
	}
	if len(weekend.ThisWeek) != 1 || !weekend.ThisWeek[0].Start.Equal(time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC)) ||
		!weekend.ThisWeek[0].End.Equal(time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)) {
		t.Errorf("weekend this week: %+v", weekend.ThisWeek)
	}
	if day.When != "Monday to Friday, 09:00 to 18:00" || weekend.When != "from Saturday 00:00 to Monday 06:00" {
		t.Errorf("when: %q, %q", day.When, weekend.When)
	}
}

func TestUnknownLanguage(t *testing.T) {
	cfg := load(t, "../../configs/dev")
	if _, err := Build(cfg, viewers["ann"], "fr", now); err == nil || !strings.Contains(err.Error(), `"fr"`) {
		t.Errorf("Build in fr: %v", err)
	}
}

func TestWrap(t *testing.T) {
	cases := []struct {
		text  string
		width int
		want  []string
	}{
		{"one two three four", 9, []string{"one two", "three", "four"}},
		{"a verylongwordindeed b", 5, []string{"a", "verylongwordindeed", "b"}},
		// Chinese breaks between characters, never before "，" or "。".
		{"你以“sam”的身份登录，不属于任何组。", 10, []string{"你以“sam”", "的身份登", "录，不属于", "任何组。"}},
	}
	for _, c := range cases {
		got := Wrap(c.text, c.width)
		if !slices.Equal(got, c.want) {
			t.Errorf("Wrap(%q, %d) = %q, want %q", c.text, c.width, got, c.want)
		}
		for _, l := range got {
			if displayWidth(l) > c.width && !strings.Contains(l, "verylong") {
				t.Errorf("line %q is wider than %d", l, c.width)
			}
		}
	}
}

// Every example configuration, and one without a policy block, is written
// down for every kind of viewer in both languages: every section has a
// title and sentences, and no sentence is empty or carries a formatting
// error.
func TestEveryConfiguration(t *testing.T) {
	bare, diags := config.Parse(config.Source{Name: "bare.hcl", Data: []byte(`
profile "seat" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	cfgs := map[string]*config.Config{"bare": bare}
	for _, dir := range []string{"dev", "lab", "startup", "studio"} {
		cfgs[dir] = load(t, filepath.Join("../../configs", dir))
	}
	for name, cfg := range cfgs {
		for vname, v := range viewers {
			for _, lang := range Languages {
				doc, err := Build(cfg, v, lang, now)
				if err != nil {
					t.Fatalf("%s, %s, %s: %v", name, vname, lang, err)
				}
				if len(doc.Sections) < 8 {
					t.Errorf("%s, %s, %s: only %d sections", name, vname, lang, len(doc.Sections))
				}
				for _, s := range doc.Sections {
					if s.Title == "" || len(s.Sentences) == 0 {
						t.Errorf("%s, %s, %s: section %q has no title or no sentence", name, vname, lang, s.ID)
					}
					for _, st := range s.Sentences {
						if st.Text == "" || strings.Contains(st.Text, "%!") || strings.Contains(st.Text, "“”") {
							t.Errorf("%s, %s, %s: section %s: sentence %q", name, vname, lang, s.ID, st.Text)
						}
					}
				}
			}
		}
	}
	doc, _ := Build(bare, viewers["ann"], English, now)
	text := allText(doc)
	for _, want := range []string{"There are no time windows: any VM may start at any time.", "Booking GPUs ahead is not offered on this server; an admin can book for you.",
		"may run as much as the GPUs allow: no limit is set.", "No VM is stopped for being idle."} {
		if !strings.Contains(text, want) {
			t.Errorf("without a policy, %q is not said:\n%s", want, text)
		}
	}
}

// An admin may book whatever the policy says (the API books for them held
// only by capacity): the rules never tell an admin that they may not, nor
// to ask an admin, in either language, with a reservations block or
// without one; a user without the block is told that booking is not
// offered here and who books for them.
func TestAdminsMayBook(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	for _, dir := range []string{"dev", "lab"} {
		cfg := load(t, filepath.Join("../../configs", dir))
		for _, lang := range Languages {
			doc, err := Build(cfg, viewers["admin"], lang, now)
			if err != nil {
				t.Fatal(err)
			}
			if !doc.You.MayBook {
				t.Errorf("%s, %s: an admin's may_book is false", dir, lang)
			}
			text := allText(doc)
			for _, wrong := range []string{"You may not book", "an admin can book for you", "你不能提前预约", "管理员可以替你预约"} {
				if strings.Contains(text, wrong) {
					t.Errorf("%s, %s: an admin is told %q:\n%s", dir, lang, wrong, text)
				}
			}
			want := map[string]string{English: "As an admin you may book GPUs ahead", Chinese: "你是管理员，可以为自己或任何人提前预约 GPU"}[lang]
			if !strings.Contains(text, want) {
				t.Errorf("%s, %s: an admin is not told %q:\n%s", dir, lang, want, text)
			}
		}
	}
	cfg := load(t, filepath.Join("../../configs", "dev")) // no reservations block
	if cfg.Policy.Reservations != nil {
		t.Fatal("configs/dev has a reservations block now: this test needs a policy without one")
	}
	for lang, want := range map[string]string{English: "Booking GPUs ahead is not offered on this server; an admin can book for you.", Chinese: "本服务器不提供提前预约 GPU；管理员可以替你预约。"} {
		doc, err := Build(cfg, viewers["ann"], lang, now)
		if err != nil {
			t.Fatal(err)
		}
		if text := allText(doc); !strings.Contains(text, want) || doc.You.MayBook {
			t.Errorf("%s: ann (may_book %v) is not told %q:\n%s", lang, doc.You.MayBook, want, text)
		}
	}
}

// A window open at every hour of every day occurs this week as the week
// itself (it has no start in the week, being open since before it).
func TestWindowOpenAllWeek(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"profiles.hcl", "server.hcl", "policy.hcl"} {
		b, err := os.ReadFile(filepath.Join("testdata/full", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "policy.hcl" {
			s := string(b)
			i, j := strings.Index(s, `  window "day"`), strings.Index(s, "  reservations {")
			if i < 0 || j < i {
				t.Fatal("testdata/full/policy.hcl: no windows before its reservations")
			}
			b = []byte(s[:i] + "  window \"always\" {\n    days    = \"mon-sun\"\n    hours   = \"00:00-24:00\"\n    classes = [\"interactive\", \"batch\"]\n  }\n\n" + s[j:])
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc, err := Build(load(t, dir), viewers["ann"], English, now)
	if err != nil {
		t.Fatal(err)
	}
	var w *api.RulesWindow
	for _, s := range doc.Sections {
		for _, st := range s.Sentences {
			if st.Window != nil && st.Window.Name == "always" {
				w = st.Window
			}
		}
	}
	// The week of now in Paris: Monday 30 November 00:00 (23:00 UTC the day before).
	ws := time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)
	if w == nil || len(w.ThisWeek) != 1 || !w.ThisWeek[0].Start.Equal(ws) || !w.ThisWeek[0].End.Equal(ws.AddDate(0, 0, 7)) {
		t.Fatalf("window always: %+v", w)
	}
}
