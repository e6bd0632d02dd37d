// Package portal is gpuvmd's web portal: the pages where people sign in,
// see the profiles they may use and what is free, ask for a VM, and watch
// and act on their VMs. pkg/server mounts it on the API's own origin.
//
// The pages are one HTML shell (page.html.tmpl) that loads a small Preact
// application (assets/*.js, written with htm's tagged templates, no build
// step). The application does everything through the public REST API with
// the session cookie: the portal's Go side only serves the shell and the
// assets, with the security headers, and sends a visitor without a session
// to /login. Preact and htm come from the npm package htm (its
// preact/standalone module), which scripts/fetch-portal.sh puts in
// assets/vendor/ at build time; without it the package still builds and
// the pages say the portal's script was not bundled.
package portal

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
)

//go:embed page.html.tmpl assets
var files embed.FS

// vendorEntry is the module the application imports; versionFile is
// written by scripts/fetch-portal.sh: "VERSION INTEGRITY".
const (
	vendorEntry = "assets/vendor/preact-htm.js"
	versionFile = "assets/vendor/VERSION"
)

// AssetPrefix is where the assets are served.
const AssetPrefix = "/portal/"

// CSP is every portal page's Content-Security-Policy: scripts, styles and
// connections from this origin only, no inline script or style, no
// framing, forms only to this origin.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; manifest-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

var page = template.Must(template.ParseFS(files, "page.html.tmpl"))

var bundled = sync.OnceValue(func() string {
	if _, err := fs.Stat(files, vendorEntry); err != nil {
		return ""
	}
	b, err := fs.ReadFile(files, versionFile)
	if err != nil {
		return "unknown version"
	}
	v, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	return v
})

// Bundled is the version of the bundled htm (Preact standalone), or ""
// when this build has none.
func Bundled() string { return bundled() }

// Pages are the portal's pages by path: what the shell's data-page says.
// Page NAME is the module assets/pages/NAME.js (its default export is the
// page), with its own styles in assets/pages/NAME.css when it has them.
var Pages = map[string]string{
	"/": "catalogue", "/vms": "vms", "/storage": "storage", "/login": "login",
	"/book": "book", "/usage": "usage", "/rules": "rules", "/tasks": "tasks",
	"/admin/fleet": "fleet", "/admin": "admin",
}

// Options are what the portal needs of the server.
type Options struct {
	// SignedIn says whether a request carries a live session; nil: no one
	// is.
	SignedIn func(*http.Request) bool
}

// Portal serves the pages and assets.
type Portal struct {
	opts   Options
	assets map[string]*asset // by path under AssetPrefix
}

// asset is one file, with its gzip form when that is smaller.
type asset struct {
	body, gz []byte
	ctype    string
	etag     string
}

// New loads the assets.
func New(o Options) *Portal {
	p := &Portal{opts: o, assets: map[string]*asset{}}
	_ = fs.WalkDir(files, "assets", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Base(name) == "README.md" || path.Base(name) == "VERSION" {
			return err
		}
		body, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		a := &asset{body: body, ctype: mime.TypeByExtension(path.Ext(name)), etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		if strings.HasSuffix(name, ".js") {
			a.ctype = "text/javascript; charset=utf-8"
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(body)
		_ = zw.Close()
		if buf.Len() < len(body) {
			a.gz = buf.Bytes()
		}
		p.assets[strings.TrimPrefix(name, "assets/")] = a
		return nil
	})
	return p
}

// Serves says whether a request is the portal's: a GET or HEAD of a page
// or an asset.
func (p *Portal) Serves(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	_, isPage := Pages[r.URL.Path]
	return isPage || strings.HasPrefix(r.URL.Path, AssetPrefix)
}

// ServeHTTP implements http.Handler for what Serves.
func (p *Portal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	if name, ok := strings.CutPrefix(r.URL.Path, AssetPrefix); ok {
		p.serveAsset(w, r, name)
		return
	}
	pg, ok := Pages[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	signedIn := p.opts.SignedIn != nil && p.opts.SignedIn(r)
	switch {
	case pg == "login" && signedIn:
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	case pg != "login" && !signedIn:
		// Signed in, the login page goes on to where they were going.
		to := "/login"
		if r.URL.Path != "/" {
			to += "?next=" + url.QueryEscape(r.URL.RequestURI())
		}
		http.Redirect(w, r, to, http.StatusSeeOther)
		return
	}
	lang := Language(r)
	var buf bytes.Buffer
	_, css := p.assets["pages/"+pg+".css"]
	err := page.Execute(&buf, shell{Lang: lang, Page: pg, Title: titles[lang][pg], Bundled: Bundled() != "", PageCSS: css,
		NotBundled: notBundled[lang], NoScript: noScript[lang], Loading: loading[lang], Skip: skip[lang]})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Vary", "Accept-Language, Cookie")
	writeBody(w, r, buf.Bytes(), nil)
}

// securityHeaders are those of every portal answer (the console page has
// its own, pkg/server/console.go).
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
}

func (p *Portal) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := p.assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("ETag", a.etag)
	// Revalidated each time (the ETag makes that a 304): an upgraded
	// gpuvmd's assets are used at once.
	h.Set("Cache-Control", "no-cache")
	if r.Header.Get("If-None-Match") == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeBody(w, r, a.body, a.gz)
}

// writeBody writes body, gzipped when the client takes it (gz: body
// compressed already, nil: compress now).
func writeBody(w http.ResponseWriter, r *http.Request, body, gz []byte) {
	h := w.Header()
	h.Add("Vary", "Accept-Encoding")
	if acceptsGzip(r) {
		if gz == nil {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write(body)
			_ = zw.Close()
			gz = buf.Bytes()
		}
		h.Set("Content-Encoding", "gzip")
		body = gz
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	// Explicitly: pkg/server serves the portal from gin's NoRoute, whose
	// status is 404 until a handler writes one.
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// LangCookie holds the language the visitor chose with the switch.
const LangCookie = "gpuvm_lang"

// Languages of the portal.
const (
	English = "en"
	Chinese = "zh-CN"
)

// Language is the page's language: the visitor's choice (LangCookie),
// else the first of English and Simplified Chinese in their
// Accept-Language, else English.
func Language(r *http.Request) string {
	if c, err := r.Cookie(LangCookie); err == nil && (c.Value == English || c.Value == Chinese) {
		return c.Value
	}
	type pref struct {
		lang string
		q    float64
		i    int
	}
	var prefs []pref
	for i, part := range strings.Split(r.Header.Get("Accept-Language"), ",") {
		tag, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		q := 1.0
		if v, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
		}
		tag = strings.ToLower(tag)
		switch {
		case q <= 0:
		case tag == "zh" || strings.HasPrefix(tag, "zh-"):
			// Traditional Chinese readers get Simplified rather than
			// English only when they ask for no English.
			if !strings.Contains(tag, "hant") && tag != "zh-tw" && tag != "zh-hk" {
				prefs = append(prefs, pref{Chinese, q, i})
			}
		case tag == "en" || strings.HasPrefix(tag, "en-"):
			prefs = append(prefs, pref{English, q, i})
		}
	}
	sort.SliceStable(prefs, func(a, b int) bool { return prefs[a].q > prefs[b].q })
	if len(prefs) > 0 {
		return prefs[0].lang
	}
	return English
}

// shell is what page.html.tmpl shows.
type shell struct {
	Lang, Page, Title                   string
	Bundled, PageCSS                    bool
	NotBundled, NoScript, Loading, Skip string
}

var (
	titles = map[string]map[string]string{
		English: {"catalogue": "GPU machines — gpuvm", "vms": "My VMs — gpuvm", "storage": "My storage — gpuvm", "tasks": "Tasks — gpuvm", "login": "Sign in — gpuvm",
			"book": "Book ahead — gpuvm", "usage": "My usage — gpuvm", "rules": "The rules — gpuvm",
			"fleet": "Fleet — gpuvm", "admin": "Admin — gpuvm"},
		Chinese: {"catalogue": "GPU 机器 — gpuvm", "vms": "我的虚拟机 — gpuvm", "storage": "我的存储 — gpuvm", "tasks": "任务 — gpuvm", "login": "登录 — gpuvm",
			"book": "预约 — gpuvm", "usage": "我的用量 — gpuvm", "rules": "使用规则 — gpuvm",
			"fleet": "机群 — gpuvm", "admin": "管理 — gpuvm"},
	}
	notBundled = map[string]string{
		English: "The portal's script (npm htm, with Preact) was not bundled in this build of gpuvmd. Build gpuvmd with 'make build' " +
			"(it runs scripts/fetch-portal.sh, which needs npm or curl and the npm registry), or run scripts/fetch-portal.sh and then go build ./cmd/gpuvmd. " +
			"Meanwhile the gpuvm command does everything the portal does.",
		Chinese: "此 gpuvmd 构建未打包门户脚本（npm htm 与 Preact）。请用 'make build' 构建 gpuvmd（它运行 scripts/fetch-portal.sh，需要 npm 或 curl 以及 npm 仓库），" +
			"或先运行 scripts/fetch-portal.sh 再 go build ./cmd/gpuvmd。在此之前，gpuvm 命令可以完成门户的所有操作。",
	}
	noScript = map[string]string{English: "The gpuvm portal needs JavaScript. The gpuvm command works without it.",
		Chinese: "gpuvm 门户需要 JavaScript。gpuvm 命令无需 JavaScript。"}
	loading = map[string]string{English: "Loading…", Chinese: "加载中…"}
	skip    = map[string]string{English: "Skip to the content", Chinese: "跳到正文"}
)
