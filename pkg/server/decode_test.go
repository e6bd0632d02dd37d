package server

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestCheckJSON(t *testing.T) {
	deep := strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1)
	justDeep := strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth)
	for _, tc := range []struct {
		name, body  string
		wantPointer string // "" with wantOK false: a fault at the root
		wantOK      bool
		wantDetail  string
	}{
		{name: "object", body: `{"name":"ok","groups":["a","b"],"x":{"y":1}}`, wantOK: true},
		{name: "scalar", body: `5`, wantOK: true},
		{name: "same key in two objects", body: `{"a":{"k":1},"b":{"k":2}}`, wantOK: true},
		{name: "same key in array objects", body: `[{"k":1},{"k":2}]`, wantOK: true},
		{name: "empty containers", body: `{"a":{},"b":[],"c":[[],{}]}`, wantOK: true},
		{name: "nesting at the limit", body: justDeep, wantOK: true},
		{name: "duplicate at the top", body: `{"name":"../x","name":"ok"}`, wantPointer: "/name", wantDetail: `"name" appears twice`},
		{name: "duplicate after a nested value", body: `{"a":{"b":[1,{"c":2}]},"a":1}`, wantPointer: "/a", wantDetail: `"a" appears twice`},
		{name: "duplicate nested", body: `{"recurrence":{"until":"x","until":"y"}}`, wantPointer: "/recurrence/until"},
		{name: "duplicate in an array's object", body: `{"ssh_keys":[{"name":"a"},{"name":"b","name":"c"}]}`, wantPointer: "/ssh_keys/1/name"},
		{name: "duplicate escaped key", body: `{"a/b":1,"a\/b":2}`, wantPointer: "/a~1b"},
		{name: "duplicate by escape", body: `{"name":1,"n\u0061me":2}`, wantPointer: "/name"},
		{name: "too deep", body: deep, wantDetail: "nests deeper"},
		{name: "trailing garbage", body: `{"a":1} x`, wantDetail: "more after"},
		{name: "two values", body: `{"a":1}{"a":2}`, wantDetail: "more after"},
		{name: "truncated", body: `{"a":[1,2`, wantPointer: "/a/2", wantDetail: "not valid JSON"},
		{name: "bad token", body: `{"a":tru}`, wantDetail: "not valid JSON"},
		{name: "key not a string", body: `{1:2}`, wantDetail: "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkJSON([]byte(tc.body))
			if tc.wantOK {
				if err != nil {
					t.Fatalf("checkJSON(%s) = %v, want nil", tc.body, err)
				}
				return
			}
			var f *jsonFault
			if !errors.As(err, &f) {
				t.Fatalf("checkJSON(%s) = %v, want a *jsonFault", tc.body, err)
			}
			if tc.wantPointer != "" && f.Pointer != tc.wantPointer {
				t.Errorf("pointer %q, want %q (%s)", f.Pointer, tc.wantPointer, f.Detail)
			}
			if !strings.Contains(f.Detail, tc.wantDetail) {
				t.Errorf("detail %q, want it to contain %q", f.Detail, tc.wantDetail)
			}
		})
	}
	for p, want := range map[string]string{"": "", "/name": "name", "/recurrence/until": "recurrence.until",
		"/ssh_keys/0": "ssh_keys[0]", "/ssh_keys/1/name": "ssh_keys[1].name", "/a~1b/0/0": "a/b[0][0]", "/0": "0"} {
		if got := pointerField(p); got != want {
			t.Errorf("pointerField(%q) = %q, want %q", p, got, want)
		}
	}
	if err := checkJSON([]byte("  ")); !errors.Is(err, io.EOF) {
		t.Errorf("checkJSON of blanks = %v, want io.EOF", err)
	}
}
