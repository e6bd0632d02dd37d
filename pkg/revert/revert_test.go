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

func TestRevertUntilFailure(t *testing.T) {
	tests := []struct {
		name  string
		steps []string // "name!" fails
		ran   []string
		fails string
	}{
		{name: "all undone, last first", steps: []string{"slots", "devices", "domain"}, ran: []string{"domain", "devices", "slots"}},
		{name: "a failure stops the rest", steps: []string{"slots", "devices!", "domain"}, ran: []string{"domain", "devices!"}, fails: "devices!"},
		{name: "the last step fails first", steps: []string{"slots", "domain!"}, ran: []string{"domain!"}, fails: "domain!"},
		{name: "nothing to undo", steps: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r Reverter
			var ran []string
			for _, s := range tc.steps {
				r.Add(func() error {
					ran = append(ran, s)
					if s[len(s)-1] == '!' {
						return errors.New(s)
					}
					return nil
				})
			}
			err := r.RevertUntilFailure()
			if !slices.Equal(ran, tc.ran) {
				t.Errorf("ran %q, want %q", ran, tc.ran)
			}
			if got := fmt.Sprint(err); (tc.fails == "" && err != nil) || (tc.fails != "" && got != tc.fails) {
				t.Errorf("err %v, want the error of %q", err, tc.fails)
			}
			ran = nil
			if err := r.RevertUntilFailure(); err != nil || len(ran) != 0 {
				t.Errorf("second run ran %q, err %v: the steps are dropped", ran, err)
			}
		})
	}
}
