// Package web holds gpuvmd's browser console: the page, its script and
// style, and noVNC (npm @novnc/novnc), which scripts/fetch-novnc.sh puts in
// novnc/ at build time and go:embed bundles into gpuvmd. Without it the
// package still builds, and the page says noVNC was not bundled.
package web

import (
	"embed"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"sync"
)

//go:embed console.html.tmpl static novnc
var files embed.FS

// noVNCEntry is the module the console page imports.
const noVNCEntry = "novnc/core/rfb.js"

// versionFile is written by scripts/fetch-novnc.sh: "VERSION INTEGRITY".
const versionFile = "novnc/VERSION"

var page = template.Must(template.ParseFS(files, "console.html.tmpl"))

// Assets are the files the page loads: static/ (its script and style) and
// novnc/. Serve them under the page's AssetBase.
func Assets() fs.FS { return files }

// AssetHandler serves Assets under prefix ("/console-assets"): static/ and
// novnc/ only, never the template.
func AssetHandler(prefix string) http.Handler {
	fsrv := http.StripPrefix(prefix, http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, prefix+"/")
		if !strings.HasPrefix(p, "static/") && !strings.HasPrefix(p, "novnc/") || strings.HasSuffix(p, "/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		fsrv.ServeHTTP(w, r)
	})
}

var noVNC = sync.OnceValue(func() string {
	if _, err := fs.Stat(files, noVNCEntry); err != nil {
		return ""
	}
	b, err := fs.ReadFile(files, versionFile)
	if err != nil {
		return "unknown version"
	}
	v, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	return v
})

// NoVNC is the version of the bundled noVNC, or "" when this build has none.
func NoVNC() string { return noVNC() }

// Page is what the console page shows.
type Page struct {
	VMID, VMName string
	// Ticket is the one-time ticket the page's websocket spends.
	Ticket string
	// WebSocketPath is the path of the websocket proxy ("/v1/console/ws").
	WebSocketPath string
	// AssetBase is where Assets are served ("/console-assets").
	AssetBase string
}

// NotBundled is the page's explanation when noVNC is missing.
const NotBundled = "noVNC was not bundled in this build of gpuvmd."

// NotBundledHint says how to fix a build without noVNC.
const NotBundledHint = "Build gpuvmd with 'make build' (it runs scripts/fetch-novnc.sh, which needs npm or curl and the npm registry), " +
	"or run scripts/fetch-novnc.sh and then go build ./cmd/gpuvmd. Meanwhile 'gpuvm console VM' opens the display in remote-viewer."

type pageData struct {
	Page
	Title, State, Message string
	Connect               bool
	Heading, Detail, Hint string
	NoVNC                 string
}

// RenderConsole writes the console page of a VM. It reports false, having
// written the page that says so, when noVNC is not bundled.
func RenderConsole(w io.Writer, p Page) (bool, error) {
	d := pageData{Page: p, Title: p.VMName, NoVNC: NoVNC()}
	if d.NoVNC == "" {
		d.State, d.Message = "failed", "noVNC not bundled"
		d.Heading, d.Detail, d.Hint = NotBundled, "The browser console needs it.", NotBundledHint
		return false, page.Execute(w, d)
	}
	d.State, d.Message, d.Connect = "loading", "loading…", true
	return true, page.Execute(w, d)
}

// RenderError writes the page of a console that cannot open: heading says
// what, detail why, hint what to do.
func RenderError(w io.Writer, p Page, heading, detail, hint string) error {
	title := p.VMName
	if title == "" {
		title = "console"
	}
	return page.Execute(w, pageData{Page: p, Title: title, State: "failed", Message: "not connected",
		Heading: heading, Detail: detail, Hint: hint, NoVNC: NoVNC()})
}
