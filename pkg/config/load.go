package config

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// Limits on what one load reads, so that text from anyone (a profile sent
// through the API later, the fuzzer) costs bounded time and memory.
const (
	MaxFileBytes  = 1 << 20 // one file
	MaxFiles      = 256     // files in one configuration
	MaxTotalBytes = 8 << 20 // all files of one configuration
	MaxItems      = 20000   // blocks and attributes in one configuration
	MaxNesting    = 100     // brackets, braces and interpolations inside each other
	MaxProfiles   = 1000
	MaxGPUBlocks  = 64  // gpu blocks of the host
	MaxWindows    = 100 // time windows
	MaxAlerts     = 100
)

// DefaultDir is where gpuvmd and the CLI look for configuration.
const DefaultDir = "/etc/gpuvm"

// Source is one configuration file held in memory.
type Source struct {
	Name string // shown in diagnostics: a path or a name like "api:profile"
	Data []byte
}

// Loader reads configuration and keeps the parsed files so that diagnostics
// can be shown with their source. A Loader is used for one load.
type Loader struct {
	// Getenv backs env() when the configuration opts in with
	// server { allow_functions = ["env"] }; nil means os.Getenv.
	Getenv func(string) string

	files map[string]*hcl.File
}

// Load reads every *.hcl file of dir (not its subdirectories; names starting
// with a dot are skipped) as one configuration. It is all-or-nothing: when the
// diagnostics hold an error the Config is nil, so a reload can swap the old
// set for the new one atomically or keep the old one. Warnings come with a
// Config.
func Load(dir string) (*Config, hcl.Diagnostics) {
	return new(Loader).LoadDir(dir)
}

// LoadDir is Load, keeping the files for WriteDiagnostics.
func (l *Loader) LoadDir(dir string) (*Config, hcl.Diagnostics) {
	paths, diags := ListDir(dir)
	if diags.HasErrors() {
		return nil, diags
	}
	cfg, more := l.LoadFiles(paths...)
	if cfg != nil {
		cfg.Dir = dir
	}
	return cfg, append(diags, more...)
}

// ListDir lists the configuration files of dir, sorted.
func ListDir(dir string) ([]string, hcl.Diagnostics) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Cannot read the configuration directory",
			Detail:   err.Error(),
		}}
	}
	var paths []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".hcl") {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		paths = append(paths, p)
	}
	if len(paths) == 0 {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "No configuration files",
			Detail:   fmt.Sprintf("%s holds no *.hcl file.", dir),
		}}
	}
	return paths, nil
}

// LoadFiles reads the named files as one configuration. Paths in them
// (state_dir, TLS files, kernels, template files) are relative to the file
// that names them.
func (l *Loader) LoadFiles(paths ...string) (*Config, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	if len(paths) > MaxFiles {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Too many configuration files",
			Detail:   fmt.Sprintf("A configuration may have at most %d files; this one has %d.", MaxFiles, len(paths)),
		}}
	}
	var srcs []Source
	total := 0
	for _, p := range paths {
		data, err := readLimited(p, MaxFileBytes)
		if err != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Cannot read configuration file",
				Detail:   err.Error(),
				Subject:  &hcl.Range{Filename: p, Start: hcl.InitialPos, End: hcl.InitialPos},
			})
			continue
		}
		total += len(data)
		if total > MaxTotalBytes {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Configuration too large",
				Detail:   fmt.Sprintf("All files of a configuration may hold at most %d bytes together.", MaxTotalBytes),
				Subject:  &hcl.Range{Filename: p, Start: hcl.InitialPos, End: hcl.InitialPos},
			})
			break
		}
		srcs = append(srcs, Source{Name: p, Data: data})
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return l.load(srcs, true)
}

// Parse decodes and checks configuration held in memory, as text from an
// untrusted source: env() and file() are never available and templates may
// not name files. It applies the same limits as Load.
func (l *Loader) Parse(srcs ...Source) (*Config, hcl.Diagnostics) {
	return l.load(srcs, false)
}

// Parse is Loader.Parse with a fresh Loader.
func Parse(srcs ...Source) (*Config, hcl.Diagnostics) {
	return new(Loader).Parse(srcs...)
}

// Files returns the files parsed so far, by name, for hcl's diagnostic
// writer.
func (l *Loader) Files() map[string]*hcl.File {
	if l.files == nil {
		l.files = map[string]*hcl.File{}
	}
	return l.files
}

type parsedFile struct {
	name    string
	dir     string // directory of the file on disk; "" for in-memory text
	file    *hcl.File
	content fileSchema
}

func (l *Loader) load(srcs []Source, trusted bool) (*Config, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	files := l.Files()
	var parsed []*parsedFile
	var cut []hcl.Range // attributes replaced by walkBody
	items := 0
	for _, src := range srcs {
		if len(src.Data) > MaxFileBytes {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Configuration file too large",
				Detail:   fmt.Sprintf("A configuration file may hold at most %d bytes; this one has %d.", MaxFileBytes, len(src.Data)),
				Subject:  &hcl.Range{Filename: src.Name, Start: hcl.InitialPos, End: hcl.InitialPos},
			})
			continue
		}
		if _, dup := files[src.Name]; dup {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "File given twice",
				Detail:   fmt.Sprintf("%s is part of this configuration already.", src.Name),
			})
			continue
		}
		if d := checkNesting(src.Name, src.Data); d != nil {
			diags = append(diags, d)
			continue
		}
		f, pd := hclsyntax.ParseConfig(src.Data, src.Name, hcl.InitialPos)
		if f != nil {
			files[src.Name] = f
		}
		diags = append(diags, pd...)
		if pd.HasErrors() || f == nil {
			continue
		}
		body, ok := f.Body.(*hclsyntax.Body)
		if !ok {
			continue
		}
		n, walkDiags := walkBody(body, 0, false, &cut)
		items += n
		diags = append(diags, walkDiags...)
		if items > MaxItems {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Configuration too large",
				Detail:   fmt.Sprintf("A configuration may have at most %d blocks and attributes in all.", MaxItems),
				Subject:  &hcl.Range{Filename: src.Name, Start: hcl.InitialPos, End: hcl.InitialPos},
			})
			return nil, sortDiagnostics(diags)
		}
		pf := &parsedFile{name: src.Name, file: f}
		if trusted {
			pf.dir = filepath.Dir(src.Name)
		}
		parsed = append(parsed, pf)
	}
	if len(parsed) == 0 {
		return nil, sortDiagnostics(diags)
	}

	// Which gated functions did the admin allow? Read statically, before
	// anything is evaluated.
	allowed := map[string]bool{}
	if trusted {
		for _, pf := range parsed {
			for name := range staticAllowFunctions(pf.file.Body.(*hclsyntax.Body)) {
				allowed[name] = true
			}
		}
	}
	getenv := l.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	b := &budget{limit: evalBudgetBytes}
	for _, pf := range parsed {
		ctx := evalContext(functionsFor(b, allowed, trusted, pf.dir, getenv))
		decoded := gohcl.DecodeBody(pf.file.Body, ctx, &pf.content)
		for _, d := range decoded {
			if within(d.Subject, cut) {
				continue // a for expression, reported already
			}
			if d.Summary == "Unsuitable value type" && strings.HasSuffix(d.Detail, "value must be known") && overlapsOther(d, decoded) {
				continue // a function call that failed, reported already
			}
			diags = append(diags, d)
		}
	}
	if len(parsed) < len(srcs) {
		// A file that did not parse would make every reference to what it
		// defines look wrong: stop at the syntax errors.
		return nil, sortDiagnostics(diags)
	}
	// Decode errors leave the rest of each block decoded: check it too, but
	// say nothing more about text that has a decode error already.
	r := &resolver{trusted: trusted, files: files, budget: b, allowed: allowed, getenv: getenv}
	cfg := r.resolve(parsed)
	for _, d := range r.diags {
		if !overlapsAny(d.Subject, diags) {
			diags = append(diags, d)
		}
	}
	diags = sortDiagnostics(diags)
	if diags.HasErrors() {
		return nil, diags
	}
	for _, pf := range parsed {
		cfg.Files = append(cfg.Files, pf.name)
	}
	return cfg, diags
}

// sortDiagnostics orders diagnostics by file and position (gohcl reports
// attributes in map order), errors and warnings together.
func sortDiagnostics(diags hcl.Diagnostics) hcl.Diagnostics {
	sort.SliceStable(diags, func(i, j int) bool {
		a, b := diags[i].Subject, diags[j].Subject
		switch {
		case a == nil && b == nil:
			return false
		case a == nil:
			return true
		case b == nil:
			return false
		case a.Filename != b.Filename:
			return a.Filename < b.Filename
		case a.Start.Byte != b.Start.Byte:
			return a.Start.Byte < b.Start.Byte
		}
		return diags[i].Summary < diags[j].Summary
	})
	return diags
}

// checkNesting refuses text nested deeper than MaxNesting before the parser
// (which recurses) sees it. It follows strings, interpolations and comments
// well enough to count only real nesting.
func checkNesting(name string, data []byte) *hcl.Diagnostic {
	const (
		code = iota
		str
	)
	stack := []byte{code}
	line, col := 1, 0
	unary := 0
	fail := func(what string) *hcl.Diagnostic {
		p := hcl.Pos{Line: line, Column: col, Byte: 0}
		return &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Configuration nested too deeply",
			Detail:   fmt.Sprintf("%s; gpuvm accepts at most %d levels.", what, MaxNesting),
			Subject:  &hcl.Range{Filename: name, Start: p, End: p},
		}
	}
	for i := 0; i < len(data); i++ {
		c := data[i]
		col++
		if c == '\n' {
			line, col = line+1, 0
		}
		top := stack[len(stack)-1]
		if top == str {
			switch {
			case c == '\\':
				i++
				col++
			case c == '"':
				stack = stack[:len(stack)-1]
			case (c == '$' || c == '%') && i+1 < len(data) && data[i+1] == '{':
				i++
				col++
				stack = append(stack, '{')
			case c == '\n':
				stack = stack[:len(stack)-1] // unterminated: let the parser say so
			}
		} else {
			switch c {
			case '"':
				stack = append(stack, str)
			case '#':
				for i+1 < len(data) && data[i+1] != '\n' {
					i++
				}
			case '/':
				if i+1 < len(data) && data[i+1] == '/' {
					for i+1 < len(data) && data[i+1] != '\n' {
						i++
					}
				} else if i+1 < len(data) && data[i+1] == '*' {
					for i+2 < len(data) && !(data[i+1] == '*' && data[i+2] == '/') {
						i++
						if data[i] == '\n' {
							line, col = line+1, 0
						}
					}
					i += 2
				}
			case '(', '[', '{':
				stack = append(stack, c)
			case ')', ']', '}':
				if len(stack) > 1 {
					stack = stack[:len(stack)-1]
				}
			}
			if c == '-' || c == '!' || c == '?' {
				unary++
				if unary > 10*MaxNesting {
					return fail("A run of operators is too long")
				}
			} else if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				unary = 0
			}
		}
		if len(stack) > MaxNesting+1 {
			return fail("Brackets, braces or interpolations are nested too deeply here")
		}
	}
	return nil
}

// walkBody counts blocks and attributes and refuses constructs whose cost is
// not linear in the text: for expressions (in attributes and in string
// templates). An attribute holding one is reported and replaced by null, so
// that the rest of the file is still decoded and checked; cut collects the
// ranges replaced, whose decoding errors are noise. Template content
// (template { content = … }) may use for directives: checkTemplateExpr bounds
// those instead.
func walkBody(body *hclsyntax.Body, depth int, inTemplate bool, cut *[]hcl.Range) (int, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	n := len(body.Attributes) + len(body.Blocks)
	for _, name := range sortedKeys(body.Attributes) {
		attr := body.Attributes[name]
		if inTemplate && name == "content" {
			continue
		}
		if d := forbidFor(attr.Expr); d.HasErrors() {
			diags = append(diags, d...)
			rng := attr.Expr.Range()
			*cut = append(*cut, rng)
			attr.Expr = &hclsyntax.LiteralValueExpr{Val: cty.NullVal(cty.DynamicPseudoType), SrcRange: rng}
		}
	}
	for _, blk := range body.Blocks {
		m, d := walkBody(blk.Body, depth+1, depth == 0 && blk.Type == "template", cut)
		n += m
		diags = append(diags, d...)
	}
	return n, diags
}

// overlapsAny reports whether rng overlaps the subject of an error in diags.
func overlapsAny(rng *hcl.Range, diags hcl.Diagnostics) bool {
	if rng == nil {
		return false
	}
	for _, d := range diags {
		if d.Severity == hcl.DiagError && d.Subject != nil && d.Subject.Filename == rng.Filename && d.Subject.Overlaps(*rng) {
			return true
		}
	}
	return false
}

// overlapsOther reports whether another error of diags is about the same
// line as d.
func overlapsOther(d *hcl.Diagnostic, diags hcl.Diagnostics) bool {
	for _, o := range diags {
		if o != d && o.Severity == hcl.DiagError && o.Subject != nil && d.Subject != nil &&
			o.Subject.Filename == d.Subject.Filename && o.Subject.Start.Line == d.Subject.Start.Line {
			return true
		}
	}
	return false
}

// within reports whether rng lies inside one of cuts.
func within(rng *hcl.Range, cuts []hcl.Range) bool {
	if rng == nil {
		return false
	}
	for _, c := range cuts {
		if c.Filename == rng.Filename && rng.Start.Byte >= c.Start.Byte && rng.End.Byte <= c.End.Byte {
			return true
		}
	}
	return false
}

// staticAllowFunctions reads server { allow_functions = [...] } without
// evaluating anything but literals.
func staticAllowFunctions(body *hclsyntax.Body) map[string]bool {
	out := map[string]bool{}
	for _, blk := range body.Blocks {
		if blk.Type != "server" {
			continue
		}
		attr, ok := blk.Body.Attributes["allow_functions"]
		if !ok {
			continue
		}
		v, diags := attr.Expr.Value(nil)
		if diags.HasErrors() || !v.IsKnown() || v.IsNull() || !v.CanIterateElements() {
			continue
		}
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			if s, ok := knownString(e); ok {
				out[s] = true
			}
		}
	}
	return out
}

func forbidFor(expr hclsyntax.Expression) hcl.Diagnostics {
	var diags hcl.Diagnostics
	hclsyntax.VisitAll(expr, func(n hclsyntax.Node) hcl.Diagnostics {
		if f, ok := n.(*hclsyntax.ForExpr); ok {
			rng := f.Range()
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "For expressions are not allowed here",
				Detail:   "gpuvm configuration is evaluated without loops, so that its cost is bounded by its length. Write the list or the text out.",
				Subject:  &rng,
			})
		}
		return nil
	})
	return diags
}
