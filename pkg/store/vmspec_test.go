package store

import "testing"

func TestSpecWithKeys(t *testing.T) {
	for _, tc := range []struct {
		spec string
		set  map[string]string
		want string
		bad  bool
	}{
		{"", map[string]string{SpecTask: "t-1"}, `{"task":"t-1"}`, false},
		{`{"hours":48}`, map[string]string{SpecTask: "t-1"}, `{"hours":48,"task":"t-1"}`, false},
		{`{"hours":48,"task":"t-1"}`, map[string]string{SpecTask: ""}, `{"hours":48}`, false},
		{`{"task":"t-1"}`, map[string]string{SpecTask: ""}, "", false},
		{"", map[string]string{SpecTask: ""}, "", false},
		{`{"hours":48,"nested":{"a":[1,2]}}`, map[string]string{"resize_to": "big"}, `{"hours":48,"nested":{"a":[1,2]},"resize_to":"big"}`, false},
		{`{"task":"x\"y"}`, map[string]string{SpecTask: `a"b`}, `{"task":"a\"b"}`, false},
		{`not json`, map[string]string{SpecTask: "t-1"}, "", true},
	} {
		got, err := SpecWithKeys(tc.spec, tc.set)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("SpecWithKeys(%q, %v) = %q, %v; want %q, error %v", tc.spec, tc.set, got, err, tc.want, tc.bad)
		}
	}
}

func TestTaskOfSpec(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"", ""},
		{`{"hours":48}`, ""},
		{`{"hours":48,"task":"t-1"}`, "t-1"},
		{`{"task":"x\"y"}`, `x"y`},
		{`not json`, ""},
		{`{"task":7}`, ""},
	} {
		if got := TaskOfSpec(tc.spec); got != tc.want {
			t.Errorf("TaskOfSpec(%q) = %q, want %q", tc.spec, got, tc.want)
		}
	}
}
