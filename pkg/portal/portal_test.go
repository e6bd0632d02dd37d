package portal

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestLanguage(t *testing.T) {
	for _, tc := range []struct{ header, cookie, want string }{
		{"", "", English},
		{"zh-CN,zh;q=0.9,en;q=0.8", "", Chinese},
		{"zh", "", Chinese},
		{"en-GB,en;q=0.9,zh-CN;q=0.5", "", English},
		{"fr-FR,fr;q=0.9,zh-CN;q=0.8,en;q=0.7", "", Chinese},
		{"de,en;q=0.5", "", English},
		{"zh-TW,zh-Hant;q=0.9", "", English}, // Simplified is not asked for
		{"en;q=0.2,zh-CN;q=0.9", "", Chinese},
		{"zh-CN;q=0", "", English},
		{"zh-CN", "en", English}, // the switch wins
		{"en", "zh-CN", Chinese},
		{"en", "klingon", English}, // an unknown choice is ignored
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Accept-Language", tc.header)
		if tc.cookie != "" {
			r.AddCookie(&http.Cookie{Name: LangCookie, Value: tc.cookie})
		}
		if got := Language(r); got != tc.want {
			t.Errorf("Accept-Language %q, cookie %q: %s, want %s", tc.header, tc.cookie, got, tc.want)
		}
	}
}

// A build without the vendored module says so on every page and loads no
// script.
func TestShellNotBundled(t *testing.T) {
	for _, lang := range []string{English, Chinese} {
		var buf bytes.Buffer
		err := page.Execute(&buf, shell{Lang: lang, Page: "login", Title: titles[lang]["login"], NotBundled: notBundled[lang],
			NoScript: noScript[lang], Loading: loading[lang], Skip: skip[lang]})
		if err != nil {
			t.Fatal(err)
		}
		html := buf.String()
		if !strings.Contains(html, `id="not-bundled"`) || !strings.Contains(html, "scripts/fetch-portal.sh") || strings.Contains(html, "<script") {
			t.Errorf("%s:\n%s", lang, html)
		}
	}
}

// Pages and assets: what Serves takes, the headers, gzip and ETags, and
// the way to /login.
func TestServe(t *testing.T) {
	signedIn := false
	p := New(Options{SignedIn: func(*http.Request) bool { return signedIn }})
	for _, tc := range []struct {
		method, path string
		want         bool
	}{{"GET", "/", true}, {"HEAD", "/vms", true}, {"GET", "/login", true}, {"GET", "/portal/app.js", true},
		{"POST", "/login", false}, {"GET", "/v1/vms", false}, {"GET", "/vms/x", false}, {"GET", "/console/x", false}} {
		if got := p.Serves(httptest.NewRequest(tc.method, tc.path, nil)); got != tc.want {
			t.Errorf("Serves(%s %s) = %v", tc.method, tc.path, got)
		}
	}
	get := func(path string, hdr ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r)
		if w.Header().Get("Content-Security-Policy") != CSP || w.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v", path, w.Header())
		}
		return w
	}
	if w := get("/vms"); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login?next=%2Fvms" {
		t.Errorf("signed out, /vms: %d %v", w.Code, w.Header())
	}
	if w := get("/login"); w.Code != 200 || !strings.Contains(w.Body.String(), `data-page="login"`) || w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("/login: %d %v", w.Code, w.Header())
	}
	signedIn = true
	if w := get("/login"); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/" {
		t.Errorf("signed in, /login: %d", w.Code)
	}
	w := get("/portal/app.js", "Accept-Encoding", "br, gzip")
	if w.Code != 200 || w.Header().Get("Content-Encoding") != "gzip" || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/javascript") {
		t.Fatalf("app.js: %d %v", w.Code, w.Header())
	}
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(zr)
	if !bytes.Contains(body, []byte("import")) {
		t.Errorf("app.js unzipped: %.100s", body)
	}
	if w2 := get("/portal/app.js", "If-None-Match", w.Header().Get("ETag")); w2.Code != http.StatusNotModified {
		t.Errorf("revalidation: %d", w2.Code)
	}
	if w := get("/portal/app.js"); w.Header().Get("Content-Encoding") != "" || !strings.Contains(w.Body.String(), "import") {
		t.Errorf("without gzip: %v", w.Header())
	}
	for _, bad := range []string{"/portal/", "/portal/vendor/README.md", "/portal/vendor/VERSION", "/portal/../page.html.tmpl"} {
		if w := get(bad); w.Code != 404 {
			t.Errorf("GET %s: %d", bad, w.Code)
		}
	}
}

// The body's font stack names a font for Simplified Chinese on each kind of
// desktop (Linux: Noto Sans CJK SC or WenQuanYi Micro Hei; macOS: PingFang
// SC; Windows: Microsoft YaHei), after the Latin fonts (whose Latin letters
// are drawn first) and before the generic family (which may have none).
func TestFontStackCoversChinese(t *testing.T) {
	css, err := files.ReadFile("assets/portal.css")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^body \{[^}]*\bfont: \S+ ([^;]+);`).FindSubmatch(css)
	if m == nil {
		t.Fatal("portal.css sets no font on body")
	}
	var families []string
	for _, f := range strings.Split(string(m[1]), ",") {
		families = append(families, strings.Trim(strings.TrimSpace(f), `"`))
	}
	latin := max(slices.Index(families, "Segoe UI"), slices.Index(families, "Noto Sans"))
	generic := slices.Index(families, "sans-serif")
	if latin < 0 || generic < 0 {
		t.Fatalf("the font stack %q lacks the Latin fonts or sans-serif", families)
	}
	for _, want := range []string{"Noto Sans CJK SC", "WenQuanYi Micro Hei", "PingFang SC", "Microsoft YaHei"} {
		if i := slices.Index(families, want); i < latin || i > generic {
			t.Errorf("the font stack %q: %q is not between the Latin fonts and sans-serif", families, want)
		}
	}
}
