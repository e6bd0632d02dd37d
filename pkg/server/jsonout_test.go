package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// writeJSON answers what c.JSON would, byte for byte (HTML characters
// escaped, no trailing newline), with a Content-Length, and keeps no
// state between answers; what cannot be encoded is the API's internal
// error, as problem+json.
func TestWriteJSONAnswersAsGinDoes(t *testing.T) {
	gin.SetMode(gin.TestMode)
	s := testServer(t, &fakeConfig{})
	at := time.Date(2026, 12, 5, 9, 30, 0, 0, time.UTC)
	tests := []struct {
		name string
		v    any
	}{
		{"a page of VMs", api.VMList{Items: []api.VM{
			{ID: "a1", Name: "box", Owner: "ann", State: "queued", QueuePosition: 3, Reason: "waiting <behind> 2 & more", CreatedAt: at},
			{ID: "b2", Name: "train", Owner: "bob", State: "running", Host: "n1", CreatedAt: at, GPUs: []api.VMGPU{{Address: "0000:41:00.0", Kind: "mig"}}},
		}, Next: "cursor"}},
		{"an empty page", api.VMList{Items: []api.VM{}}},
		{"a map", map[string]any{"k": "<script>", "n": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := httptest.NewRecorder()
			wc, _ := gin.CreateTestContext(want)
			wc.JSON(http.StatusOK, tt.v)
			for range 2 { // the second reuses the first's buffer
				got := httptest.NewRecorder()
				gc, _ := gin.CreateTestContext(got)
				gc.Request = httptest.NewRequest("GET", "/", nil)
				s.writeJSON(gc, http.StatusOK, tt.v)
				if got.Code != http.StatusOK {
					t.Fatalf("status %d", got.Code)
				}
				if got.Body.String() != want.Body.String() {
					t.Fatalf("body\n got %s\nwant %s", got.Body, want.Body)
				}
				if ct, wct := got.Header().Get("Content-Type"), want.Header().Get("Content-Type"); ct != wct {
					t.Fatalf("Content-Type %q, gin's %q", ct, wct)
				}
				if cl := got.Header().Get("Content-Length"); cl != strconv.Itoa(want.Body.Len()) {
					t.Fatalf("Content-Length %q for %d bytes", cl, want.Body.Len())
				}
			}
		})
	}
	// A value JSON cannot encode: the internal error's problem, nothing
	// of the value written.
	rec := httptest.NewRecorder()
	c, _ := gin.CreateTestContext(rec)
	c.Request = httptest.NewRequest("GET", "/", nil)
	s.writeJSON(c, http.StatusOK, map[string]any{"f": func() {}})
	var p Problem
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Type != errInternal.Type {
		t.Fatalf("unencodable: %d %s %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
}
