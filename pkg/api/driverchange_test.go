package api

import (
	"strings"
	"testing"
	"time"
)

func TestDriverChangeRequestProblem(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	ok := DriverChangeRequest{Driver: "550.90.07", At: now.Add(72 * time.Hour), Note: "vGPU 17.4"}
	for _, tc := range []struct {
		name  string
		edit  func(*DriverChangeRequest)
		field string
		msg   string
	}{
		{"valid", func(*DriverChangeRequest) {}, "", ""},
		{"two parts", func(r *DriverChangeRequest) { r.Driver = "535.54" }, "", ""},
		{"no note", func(r *DriverChangeRequest) { r.Note = "" }, "", ""},
		{"a year ahead", func(r *DriverChangeRequest) { r.At = now.AddDate(1, 0, 0) }, "", ""},
		{"no driver", func(r *DriverChangeRequest) { r.Driver = "" }, "driver", "not an NVIDIA driver version"},
		{"a word", func(r *DriverChangeRequest) { r.Driver = "latest" }, "driver", "not an NVIDIA driver version"},
		{"four parts", func(r *DriverChangeRequest) { r.Driver = "550.90.07.1" }, "driver", "not an NVIDIA driver version"},
		{"injected", func(r *DriverChangeRequest) { r.Driver = "550.90; rm -rf /" }, "driver", "not an NVIDIA driver version"},
		{"no time", func(r *DriverChangeRequest) { r.At = time.Time{} }, "at", "missing"},
		{"now", func(r *DriverChangeRequest) { r.At = now }, "at", "is not ahead"},
		{"past", func(r *DriverChangeRequest) { r.At = now.Add(-time.Hour) }, "at", "is not ahead"},
		{"too far", func(r *DriverChangeRequest) { r.At = now.AddDate(1, 0, 1) }, "at", "more than a year ahead"},
		{"long note", func(r *DriverChangeRequest) { r.Note = strings.Repeat("ü", MaxDriverChangeNote+1) }, "note", "one line"},
		{"two lines", func(r *DriverChangeRequest) { r.Note = "a\nb" }, "note", "one line"},
		{"NUL", func(r *DriverChangeRequest) { r.Note = "a\x00b" }, "note", "one line"},
		{"bad UTF-8", func(r *DriverChangeRequest) { r.Note = "a\xffb" }, "note", "one line"},
	} {
		r := ok
		tc.edit(&r)
		field, msg := r.Problem(now)
		if field != tc.field || !strings.Contains(msg, tc.msg) || (tc.field == "") != (msg == "") {
			t.Errorf("%s: (%q, %q), want field %q with %q", tc.name, field, msg, tc.field, tc.msg)
		}
	}
}
