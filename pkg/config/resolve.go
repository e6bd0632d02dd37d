package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// resolver turns decoded blocks into a Config, checking everything that the
// schema alone cannot: values, references between blocks, and what this
// server's GPUs can give. It records every problem and goes on.
type resolver struct {
	trusted bool
	files   map[string]*hcl.File
	budget  *budget
	allowed map[string]bool
	getenv  func(string) string
	diags   hcl.Diagnostics
	cfg     *Config
	gpus    *gpuWorld
}

func (r *resolver) resolve(parsed []*parsedFile) *Config {
	r.cfg = &Config{
		Images:    map[string]*Image{},
		Templates: map[string]*Template{},
		Profiles:  map[string]*Profile{},
	}
	var servers []*serverBlock
	var images []*imageBlock
	var templates []*templateBlock
	var profiles []*profileBlock
	var policies []*policyBlock
	for _, pf := range parsed {
		servers = append(servers, pf.content.Servers...)
		images = append(images, pf.content.Images...)
		templates = append(templates, pf.content.Templates...)
		profiles = append(profiles, pf.content.Profiles...)
		policies = append(policies, pf.content.Policies...)
	}
	var server *serverBlock
	for i, s := range servers {
		if i == 0 {
			server = s
			continue
		}
		r.errf(s.DefRange, "Duplicate server block", "A configuration has one server block; the first is at %s.", rangeString(servers[0].DefRange))
	}
	var policy *policyBlock
	for i, p := range policies {
		if i == 0 {
			policy = p
			continue
		}
		r.errf(p.DefRange, "Duplicate policy block", "A configuration has one policy block; the first is at %s.", rangeString(policies[0].DefRange))
	}
	if len(profiles) > MaxProfiles {
		r.errf(profiles[MaxProfiles].DefRange, "Too many profiles", "A configuration may have at most %d profiles.", MaxProfiles)
		profiles = profiles[:MaxProfiles]
	}
	r.resolveServer(server)
	r.gpus = r.newGPUWorld()
	for _, b := range images {
		r.resolveImage(b)
	}
	for _, b := range templates {
		r.resolveTemplate(b)
	}
	r.resolvePolicy(policy)
	for _, b := range profiles {
		r.resolveProfile(b)
	}
	r.resolveReservations(policy)
	r.checkWindows()
	return r.cfg
}

// --- diagnostics ---

func (r *resolver) errf(rng hcl.Range, summary, format string, args ...any) {
	r.add(hcl.DiagError, rng, summary, fmt.Sprintf(format, args...))
}

func (r *resolver) warnf(rng hcl.Range, summary, format string, args ...any) {
	r.add(hcl.DiagWarning, rng, summary, fmt.Sprintf(format, args...))
}

func (r *resolver) add(sev hcl.DiagnosticSeverity, rng hcl.Range, summary, detail string) {
	d := &hcl.Diagnostic{Severity: sev, Summary: summary, Detail: detail}
	if rng.Filename != "" {
		rr := rng
		d.Subject = &rr
	}
	r.diags = append(r.diags, d)
}

func (r *resolver) errorCount() int {
	n := 0
	for _, d := range r.diags {
		if d.Severity == hcl.DiagError {
			n++
		}
	}
	return n
}

// rangeString is "file:line" of a range, for "the first is at …".
func rangeString(rng hcl.Range) string {
	return fmt.Sprintf("%s:%d", rng.Filename, rng.Start.Line)
}

// --- attribute access ---

func syntaxAttr(body hcl.Body, name string) *hclsyntax.Attribute {
	if b, ok := body.(*hclsyntax.Body); ok && b != nil {
		return b.Attributes[name]
	}
	return nil
}

// hasBlock reports whether the body has a block of the type, decoded or not.
func hasBlock(body hcl.Body, typ string) bool {
	if b, ok := body.(*hclsyntax.Body); ok && b != nil {
		for _, blk := range b.Blocks {
			if blk.Type == typ {
				return true
			}
		}
	}
	return false
}

// has reports whether the body writes the attribute.
func has(body hcl.Body, name string) bool { return syntaxAttr(body, name) != nil }

// valueRange is the range of an attribute's value, or fallback when the
// attribute is not written.
func valueRange(body hcl.Body, name string, fallback hcl.Range) hcl.Range {
	if a := syntaxAttr(body, name); a != nil {
		return a.Expr.Range()
	}
	return fallback
}

// attrRange is the whole "name = value" of an attribute, or fallback.
func attrRange(body hcl.Body, name string, fallback hcl.Range) hcl.Range {
	if a := syntaxAttr(body, name); a != nil {
		return a.SrcRange
	}
	return fallback
}

// listItemRange is the range of the i-th element of a list attribute written
// as a literal list, else of the whole value.
func listItemRange(body hcl.Body, name string, i int, fallback hcl.Range) hcl.Range {
	a := syntaxAttr(body, name)
	if a == nil {
		return fallback
	}
	if t, ok := a.Expr.(*hclsyntax.TupleConsExpr); ok && i < len(t.Exprs) {
		return t.Exprs[i].Range()
	}
	return a.Expr.Range()
}

func str(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

// oneOf checks that an attribute's value is one of options.
func (r *resolver) oneOf(body hcl.Body, name, val string, options []string, fallback hcl.Range) bool {
	for _, o := range options {
		if val == o {
			return true
		}
	}
	r.errf(valueRange(body, name, fallback), "Invalid "+name,
		"%q is not one of %s.%s", val, quoteList(options), suggestion(val, options))
	return false
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	switch len(q) {
	case 0:
		return "nothing"
	case 1:
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// suggestion is " Did you mean "x"?" when a near name exists.
func suggestion(given string, options []string) string {
	if s := nearest(given, options); s != "" {
		return fmt.Sprintf(" Did you mean %q?", s)
	}
	return ""
}

// nearest returns the option closest to given by edit distance, if close
// enough to be a likely typo.
func nearest(given string, options []string) string {
	best, bestD := "", 1<<30
	g := strings.ToLower(given)
	if len(g) >= 3 {
		for _, o := range options {
			if lo := strings.ToLower(o); strings.HasPrefix(lo, g) && lo != g {
				return o
			}
		}
	}
	for _, o := range options {
		d := editDistance(g, strings.ToLower(o))
		if d < bestD {
			best, bestD = o, d
		}
	}
	if best == "" || bestD == 0 && best == given {
		return ""
	}
	limit := 3
	if len(given) < 5 {
		limit = 2
	}
	if bestD > limit {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		if a == b {
			return 0
		}
		return 1 << 20
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func (r *resolver) size(body hcl.Body, name string, p *string, def uint64, fallback hcl.Range) (uint64, bool) {
	if p == nil {
		return def, true
	}
	v, err := ParseSize(*p)
	if err != nil {
		r.errf(valueRange(body, name, fallback), "Invalid size", "%s: %v.", name, err)
		return def, false
	}
	return v, true
}

func (r *resolver) duration(body hcl.Body, name string, p *string, def time.Duration, fallback hcl.Range) (time.Duration, bool) {
	if p == nil {
		return def, true
	}
	v, err := ParseDuration(*p)
	if err != nil {
		r.errf(valueRange(body, name, fallback), "Invalid duration", "%s: %v.", name, err)
		return def, false
	}
	return v, true
}

var (
	namePattern      = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	principalPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,63}$`)
)

// checkName checks the label of a named block: lower case letters, digits,
// '.', '_' and '-', at most 63, as they appear in URLs and commands.
func (r *resolver) checkName(kind, name string, rng hcl.Range) bool {
	if namePattern.MatchString(name) {
		return true
	}
	r.errf(rng, "Invalid "+kind+" name", "%q: a %s name is 1 to 63 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit.", name, kind)
	return false
}

func (r *resolver) checkPrincipal(kind, name string, rng hcl.Range) bool {
	if principalPattern.MatchString(name) {
		return true
	}
	r.errf(rng, "Invalid "+kind+" name", "%q: a %s name is 1 to 64 letters, digits, '_', '.', '@', '+' or '-', starting with a letter, digit or '_'.", name, kind)
	return false
}

// path resolves p relative to the directory of the file that wrote it.
func (r *resolver) path(p string, rng hcl.Range) string {
	if p == "" || filepath.IsAbs(p) || !r.trusted || rng.Filename == "" {
		return p
	}
	joined := filepath.Join(filepath.Dir(rng.Filename), p)
	if abs, err := filepath.Abs(joined); err == nil {
		return abs
	}
	return joined
}

// checkDuplicates reports names given twice in a list attribute.
func (r *resolver) checkDuplicates(body hcl.Body, name string, xs []string, fallback hcl.Range) {
	seen := map[string]bool{}
	for i, x := range xs {
		if seen[x] {
			r.errf(listItemRange(body, name, i, fallback), "Duplicate name", "%s names %q twice.", name, x)
		}
		seen[x] = true
	}
}
