package server

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestEventStreamWire(t *testing.T) {
	s, _, _ := vmServer(t)
	s.eventKeepAlive = 20 * time.Millisecond
	s.hub = newEventHub(s.Store, 5*time.Millisecond, s.log)
	srv := httptest.NewServer(s)
	defer srv.Close()

	for _, tc := range []struct{ name, query, header, field string }{
		{"after not a number", "?after=x", "", "after"},
		{"after negative", "?after=-3", "", "after"},
		{"bad Last-Event-ID", "", "seven", "Last-Event-ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/v1/events"+tc.query, nil)
			req.Header.Set("Authorization", "Bearer ann-token")
			if tc.header != "" {
				req.Header.Set("Last-Event-ID", tc.header)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != 422 || !strings.Contains(rec.Body.String(), `"field":"`+tc.field+`"`) {
				t.Errorf("%d %s", rec.Code, rec.Body)
			}
		})
	}

	req, _ := http.NewRequest("GET", srv.URL+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer ann-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, ct)
	}
	r := bufio.NewReader(resp.Body)
	first, _ := r.ReadString('\n')
	if !strings.HasPrefix(first, ": gpuvm events after 0") {
		t.Errorf("first line %q", first)
	}
	// An event as the wire format has it.
	rec, _ := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"w"}`)
	if rec.Code != 202 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	var lines []string
	keepAlives := 0
	for len(lines) < 3 || keepAlives == 0 {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", lines, err)
		}
		switch l = strings.TrimSuffix(l, "\n"); {
		case l == ": keep-alive":
			keepAlives++
		case l != "" && !strings.HasPrefix(l, "retry:"):
			lines = append(lines, l)
		}
	}
	if lines[0] != "id: 1" || lines[1] != "event: vm.created" || !strings.HasPrefix(lines[2], `data: {"id":1,`) || !strings.Contains(lines[2], `"owner":"ann"`) {
		t.Errorf("event lines %q", lines)
	}
	// Close ends the stream: the body reaches its end.
	s.Close()
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, r); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("stream ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream stayed open after Close")
	}
}
