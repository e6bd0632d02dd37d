package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// /healthz says gpuvmd's version (gpuvmd --version says the same).
func TestHealthzVersion(t *testing.T) {
	s := testServer(t, nil)
	s.Version = "1.2.3"
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	var got map[string]string
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != http.StatusOK {
		t.Fatalf("%d %s (%v)", w.Code, w.Body, err)
	}
	if got["status"] != "ok" || got["version"] != "1.2.3" {
		t.Errorf("healthz = %v", got)
	}
}
