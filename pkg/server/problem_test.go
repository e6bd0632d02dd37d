package server

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// A store error no handler mapped still gets the status its kind means,
// with its text; anything else stays the server's own (nil here: a 500).
func TestStoreProblem(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("get VM x: %w", store.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("claim: %w", store.ErrSlotTaken), http.StatusConflict},
		{store.ErrNameTaken, http.StatusConflict},
		{fmt.Errorf("usage by: %w: unknown grouping", store.ErrInvalid), http.StatusUnprocessableEntity},
		{errors.New("disk full"), 0},
		{store.ErrInvalidToken, 0},
	} {
		p := storeProblem(tc.err)
		switch {
		case tc.status == 0 && p != nil:
			t.Errorf("%v: problem %d, want none", tc.err, p.Status)
		case tc.status != 0 && (p == nil || p.Status != tc.status || p.Detail != tc.err.Error()):
			t.Errorf("%v: problem %+v, want status %d with the error's text", tc.err, p, tc.status)
		}
	}
}
