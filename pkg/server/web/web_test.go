package web

import (
	"bytes"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func render(t *testing.T, p Page) (string, bool) {
	t.Helper()
	var b bytes.Buffer
	ok, err := RenderConsole(&b, p)
	if err != nil {
		t.Fatal(err)
	}
	return b.String(), ok
}

func TestConsolePage(t *testing.T) {
	p := Page{VMID: "0190-id", VMName: "box", Ticket: `gvt_a"b<c`, WebSocketPath: "/v1/console/ws", AssetBase: "/console-assets"}
	t.Run("bundled", func(t *testing.T) {
		defer stubNoVNC("1.7.0")()
		html, ok := render(t, p)
		for _, want := range []string{
			`<script type="module" src="/console-assets/static/console.js">`,
			`data-vm="0190-id"`, `data-ws="/v1/console/ws"`, `data-name="box"`,
			`data-ticket="gvt_a&#34;b&lt;c"`, // escaped, not able to break out
			`id="status" role="status" data-state="loading"`,
			"noVNC 1.7.0",
		} {
			if !strings.Contains(html, want) {
				t.Errorf("page lacks %s:\n%s", want, html)
			}
		}
		if !ok || strings.Contains(html, NotBundled) {
			t.Errorf("bundled page says it is not")
		}
	})
	t.Run("not bundled", func(t *testing.T) {
		defer stubNoVNC("")()
		html, ok := render(t, p)
		if ok || !strings.Contains(html, NotBundled) || !strings.Contains(html, "scripts/fetch-novnc.sh") ||
			strings.Contains(html, "<script") || strings.Contains(html, "gvt_") {
			t.Errorf("page without noVNC:\n%s", html)
		}
	})
	t.Run("error", func(t *testing.T) {
		var b bytes.Buffer
		if err := RenderError(&b, p, "This console link has expired", "A link must be opened within a minute.", "Run 'gpuvm console VM'"); err != nil {
			t.Fatal(err)
		}
		html := b.String()
		if !strings.Contains(html, "<h1>This console link has expired</h1>") || !strings.Contains(html, `data-state="failed"`) ||
			strings.Contains(html, "<script") || strings.Contains(html, "gvt_") {
			t.Errorf("error page:\n%s", html)
		}
	})
}

func stubNoVNC(v string) func() {
	old := noVNC
	noVNC = func() string { return v }
	return func() { noVNC = old }
}

func TestAssets(t *testing.T) {
	h := AssetHandler("/console-assets")
	for _, tc := range []struct {
		path   string
		status int
		ctype  string
	}{
		{"/console-assets/static/console.js", 200, "text/javascript; charset=utf-8"},
		{"/console-assets/static/console.css", 200, "text/css; charset=utf-8"},
		{"/console-assets/console.html.tmpl", 404, ""},
		{"/console-assets/static/", 404, ""},
		{"/console-assets/novnc/README.md", 200, ""},
		{"/console-assets/../web.go", 404, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != tc.status || tc.ctype != "" && rec.Header().Get("Content-Type") != tc.ctype {
			t.Errorf("GET %s: %d %q", tc.path, rec.Code, rec.Header().Get("Content-Type"))
		}
		if rec.Code == 200 && rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s without nosniff", tc.path)
		}
	}
	// The page's script imports noVNC from where the handler serves it.
	js, err := fs.ReadFile(Assets(), "static/console.js")
	if err != nil || !strings.Contains(string(js), "from '../novnc/core/rfb.js'") {
		t.Errorf("console.js: %v", err)
	}
	if NoVNC() == "" {
		t.Log("noVNC is not bundled in this build (scripts/fetch-novnc.sh fills pkg/server/web/novnc)")
		return
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/console-assets/novnc/core/rfb.js", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "export default class RFB") {
		t.Errorf("rfb.js: %d", rec.Code)
	}
}
