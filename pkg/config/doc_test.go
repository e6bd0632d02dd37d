package config

import (
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// schemaTree walks the gohcl structs of schema.go: for every block path
// ("server", "server.tls", "policy.user.quota") the names of its attributes
// and of the blocks inside it.
func schemaTree() map[string][]string {
	tree := map[string][]string{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			tag := t.Field(i).Tag.Get("hcl")
			name, kind, _ := strings.Cut(tag, ",")
			switch kind {
			case "", "attr", "optional":
				if name != "" {
					names = append(names, name)
				}
			case "block":
				names = append(names, name)
				child := name
				if path != "" {
					child = path + "." + name
				}
				walk(t.Field(i).Type, child)
			}
		}
		sort.Strings(names)
		if path != "" {
			tree[path] = names
		}
	}
	walk(reflect.TypeOf(fileSchema{}), "")
	return tree
}

var (
	docHeadingRE = regexp.MustCompile("^#{2,4} (.*)$")
	docPathRE    = regexp.MustCompile("`([a-z_]+(?:\\.[a-z_]+)*)`")
	docRowRE     = regexp.MustCompile("^\\| `([a-z_]+)` \\|")
)

// docTree reads docs/config.md: each heading naming block paths in
// backticks, and the attribute rows of the table under it.
func docTree(t *testing.T) (map[string][]string, []string) {
	data, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	tree := map[string][]string{}
	var current []string
	var examples []string
	var inCode bool
	var lang string
	var code strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			if !inCode {
				inCode, lang = true, strings.TrimPrefix(line, "```")
				code.Reset()
			} else {
				inCode = false
				if lang == "hcl" {
					examples = append(examples, code.String())
				}
			}
			continue
		}
		if inCode {
			code.WriteString(line + "\n")
			continue
		}
		if m := docHeadingRE.FindStringSubmatch(line); m != nil {
			current = nil
			for _, p := range docPathRE.FindAllStringSubmatch(m[1], -1) {
				current = append(current, p[1])
				if _, ok := tree[p[1]]; !ok {
					tree[p[1]] = []string{}
				}
			}
			continue
		}
		if m := docRowRE.FindStringSubmatch(line); m != nil {
			for _, p := range current {
				tree[p] = append(tree[p], m[1])
			}
		}
	}
	for p := range tree {
		sort.Strings(tree[p])
	}
	return tree, examples
}

// TestDocMatchesSchema fails when docs/config.md misses a block or an
// attribute of the schema, or documents one that does not exist.
func TestDocMatchesSchema(t *testing.T) {
	schema := schemaTree()
	doc, _ := docTree(t)
	for path, names := range schema {
		got, ok := doc[path]
		if !ok {
			t.Errorf("docs/config.md has no section for block %s (a heading with `%s`)", path, path)
			continue
		}
		if strings.Join(got, " ") != strings.Join(names, " ") {
			t.Errorf("docs/config.md, `%s`: documents %v; the schema has %v", path, got, names)
		}
	}
	for path := range doc {
		if _, ok := schema[path]; !ok {
			t.Errorf("docs/config.md documents block `%s`, which the schema does not have", path)
		}
	}
}

// TestDocExamples loads the ```hcl examples of docs/config.md together, as
// one configuration: they must be valid and clean.
func TestDocExamples(t *testing.T) {
	_, examples := docTree(t)
	if len(examples) < 5 {
		t.Fatalf("only %d hcl examples", len(examples))
	}
	l := new(Loader)
	cfg, diags := l.Parse(Source{Name: "docs/config.md", Data: []byte(strings.Join(examples, "\n"))})
	if len(diags) > 0 {
		t.Fatalf("the examples of docs/config.md are not clean:\n%s", render(t, l, diags))
	}
	for _, block := range []string{"server", "image", "template", "profile", "policy"} {
		found := false
		for _, e := range examples {
			if strings.HasPrefix(strings.TrimSpace(e), block+" ") {
				found = true
			}
		}
		if !found {
			t.Errorf("no example starts with a %s block", block)
		}
	}
	if len(cfg.Profiles) < 4 {
		t.Errorf("%d profiles in the examples", len(cfg.Profiles))
	}
}
