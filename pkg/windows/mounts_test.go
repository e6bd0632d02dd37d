package windows

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"
)

func TestMountsScriptGolden(t *testing.T) {
	b, err := MountsScript(nil)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, MountsScriptFile, b)
	s := string(b)
	for _, want := range []string{
		`Join-Path $d.Root 'gpuvm-mounts.json'`,
		`$launcher = 'C:\Program Files (x86)\WinFsp\bin\launchctl-x64.exe'`,
		`& $launcher start 'virtiofs' $instance $m.tag $m.drive`,
		`$m.tag -notmatch '^[A-Za-z0-9._-]{1,36}$'`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the mounts script lacks %q", want)
		}
	}
	if strings.Contains(s, "{{") || strings.Contains(s, "<no value>") {
		t.Error("the mounts script holds an unrendered template action")
	}
	// Its brackets balance, as far as text can tell (TestTaskRunnerBalanced).
	depth := map[rune]int{}
	pairs := map[rune]rune{'}': '{', ')': '(', ']': '['}
	for i, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		for _, r := range stripStrings(l, false) {
			switch r {
			case '{', '(', '[':
				depth[r]++
			case '}', ')', ']':
				if depth[pairs[r]]--; depth[pairs[r]] < 0 {
					t.Fatalf("line %d: %q closes what was not opened", i+1, l)
				}
			}
		}
	}
	for r, n := range depth {
		if n != 0 {
			t.Errorf("%d %q left open", n, r)
		}
	}
	// An override directory's own script wins.
	if b, err := MountsScript(fstest.MapFS{MountsScriptFile + ".tmpl": {Data: []byte("# mine {{.MountsFile}}")}}); err != nil || string(b) != "# mine gpuvm-mounts.json" {
		t.Errorf("override: %q %v", b, err)
	}
}

func TestMountsJSON(t *testing.T) {
	b, err := MountsJSON([]Mount{{Tag: "gpuvm-home", Drive: HomeDrive, Name: "ann's home"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []Mount
	if err := json.Unmarshal(b, &got); err != nil || len(got) != 1 || got[0].Tag != "gpuvm-home" || got[0].Drive != "H:" {
		t.Fatalf("%s: %+v %v", b, got, err)
	}
	if b, err := MountsJSON(nil); err != nil || string(b) != "[]" {
		t.Errorf("none: %s %v", b, err)
	}
	for _, tc := range []struct {
		name string
		m    []Mount
		want string
	}{
		{"tag with a space", []Mount{{Tag: "a b", Drive: "H:", Name: "x"}}, "tag"},
		{"tag with a quote", []Mount{{Tag: "a'b", Drive: "H:", Name: "x"}}, "tag"},
		{"long tag", []Mount{{Tag: strings.Repeat("t", 37), Drive: "H:", Name: "x"}}, "tag"},
		{"drive C", []Mount{{Tag: "t", Drive: "C:", Name: "x"}}, "drive"},
		{"drive path", []Mount{{Tag: "t", Drive: `H:\x`, Name: "x"}}, "drive"},
		{"lower-case drive", []Mount{{Tag: "t", Drive: "h:", Name: "x"}}, "drive"},
		{"drive twice", []Mount{{Tag: "t", Drive: "H:", Name: "x"}, {Tag: "u", Drive: "H:", Name: "y"}}, "taken"},
		{"no name", []Mount{{Tag: "t", Drive: "H:"}}, "name"},
		{"name with a newline", []Mount{{Tag: "t", Drive: "H:", Name: "a\nb"}}, "name"},
	} {
		if _, err := MountsJSON(tc.m); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming the %s", tc.name, err, tc.want)
		}
	}
}
