package revert

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

func TestReverter(t *testing.T) {
	errTwo := errors.New("two")
	tests := []struct {
		name       string
		steps      []string // "name" undoes fine, "name!" fails, "" or "!" unnamed
		success    bool
		order      []string
		undone     []string
		left       []string
		errs       int
		wantErrTwo bool
	}{
		{name: "reverse order", steps: []string{"a", "b", "c"}, order: []string{"c", "b", "a"}, undone: []string{"c", "b", "a"}},
		{name: "a failure goes on", steps: []string{"a", "b!", "c"}, order: []string{"c", "b!", "a"}, undone: []string{"c", "a"}, left: []string{"b!"}, errs: 1, wantErrTwo: true},
		{name: "unnamed steps are not listed", steps: []string{"", "!", "a"}, order: []string{"a", "!", ""}, undone: []string{"a"}, errs: 1, wantErrTwo: true},
		{name: "success drops them", steps: []string{"a", "b!"}, success: true},
		{name: "nothing to undo", steps: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r Reverter
			var order []string
			for _, s := range tc.steps {
				undo := func() error {
					order = append(order, s)
					if len(s) > 0 && s[len(s)-1] == '!' {
						return fmt.Errorf("undo %q: %w", s, errTwo)
					}
					return nil
				}
				if s == "" || s == "!" {
					r.Add(undo)
				} else {
					r.AddNamed(s, undo)
				}
			}
			if tc.success {
				r.Success()
			}
			res := r.Unwind()
			if !slices.Equal(order, tc.order) {
				t.Errorf("ran %q, want %q", order, tc.order)
			}
			if !slices.Equal(res.Undone, tc.undone) || !slices.Equal(res.Left, tc.left) || len(res.Errs) != tc.errs {
				t.Errorf("undone %q left %q errs %v, want %q %q %d", res.Undone, res.Left, res.Errs, tc.undone, tc.left, tc.errs)
			}
			if got := errors.Is(res.Err(), errTwo); got != tc.wantErrTwo {
				t.Errorf("Err() %v: wraps the step's error %v, want %v", res.Err(), got, tc.wantErrTwo)
			}
			order = nil
			if err := r.Revert(); err != nil || len(order) != 0 {
				t.Errorf("second Revert ran %q, err %v: each step runs once", order, err)
			}
		})
	}
}
