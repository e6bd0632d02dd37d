package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	ctyjson "github.com/zclconf/go-cty/cty/json"
)

// Cloud-init templates are HCL string templates ("${user}", "%{ for k in
// ssh_authorized_keys }…%{ endfor }"), written inline (content = <<-EOT …) or
// in a file (file = "templates/dev.yaml"). They are parsed and checked when the
// configuration loads — every variable they use must be a built-in or one of
// the template's vars — and rendered per VM with Config.RenderCloudInit.

// BuiltinTemplateVars are the variables every template may use, set per VM.
// password_hash is the SHA-512 crypt hash of the VM's one-time desktop
// password ("" for a VM without one), for users[].passwd.
// uid is the owner's stable uid when the profile has a home (the owner of
// the home, for users[].uid), else 0.
var BuiltinTemplateVars = []string{"user", "hostname", "ssh_authorized_keys", "vm_id", "vm_name", "profile", "password_hash", "uid"}

// maxTemplateForDepth bounds "%{ for }" directives inside each other.
const maxTemplateForDepth = 2

// Template is a named cloud-init template.
type Template struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	File        string `json:"file,omitempty"`
	// Vars are the template's own variables with their defaults.
	Vars      json.RawMessage `json:"vars,omitempty"`
	DeclRange hcl.Range       `json:"-"`

	expr     hcl.Expression
	defaults map[string]cty.Value
}

// UsesPassword reports whether the template uses password_hash: whether a
// VM's one-time desktop password reaches its guest.
func (t *Template) UsesPassword() bool {
	if t == nil || t.expr == nil {
		return false
	}
	for _, tr := range t.expr.Variables() {
		if tr.RootName() == "password_hash" {
			return true
		}
	}
	return false
}

// VarNames lists the template's own variables, sorted.
func (t *Template) VarNames() []string { return sortedKeys(t.defaults) }

func (r *resolver) resolveTemplate(b *templateBlock) {
	if !r.checkName("template", b.Name, b.LabelRange) {
		return
	}
	if first, dup := r.cfg.Templates[b.Name]; dup {
		where := "elsewhere"
		if first != nil {
			where = rangeString(first.DeclRange)
		}
		r.errf(b.LabelRange, "Duplicate template", "Template %q is defined twice; the first is at %s.", b.Name, where)
		return
	}
	t := &Template{Name: b.Name, Description: str(b.Description, ""), DeclRange: b.DefRange}
	r.cfg.Templates[b.Name] = nil // known from here on, even if broken
	hasContent := has(b.Body, "content")
	switch {
	case hasContent && b.File != nil:
		r.errf(attrRange(b.Body, "file", b.DefRange), "content and file exclude each other", "A template is written inline (content) or read from a file (file), not both.")
		return
	case hasContent:
		t.expr = b.Content
	case b.File != nil:
		rng := valueRange(b.Body, "file", b.DefRange)
		if !r.trusted {
			r.errf(rng, "Template files not allowed here", "Only configuration loaded from files may read template files; write the template inline with content.")
			return
		}
		path := r.path(*b.File, rng)
		t.File = path
		data, err := readLimited(path, MaxFileBytes)
		if err != nil {
			if os.IsNotExist(err) {
				shown := *b.File
				if !filepath.IsAbs(shown) {
					shown = filepath.Join(filepath.Dir(rng.Filename), shown)
				}
				err = fmt.Errorf("%s does not exist (a relative path is relative to the file that names it)", shown)
			}
			r.errf(rng, "Cannot read template file", "%v.", err)
			return
		}
		if d := checkNesting(path, data); d != nil {
			r.diags = append(r.diags, d)
			return
		}
		expr, diags := hclsyntax.ParseTemplate(data, path, hcl.InitialPos)
		if f, ok := r.files[path]; !ok || f == nil {
			r.files[path] = &hcl.File{Bytes: data}
		}
		if diags.HasErrors() {
			r.diags = append(r.diags, diags...)
			return
		}
		t.expr = expr
	case has(b.Body, "file"):
		return // its value is wrong, and reported
	default:
		r.errf(b.DefRange, "Template has no text", "Template %q needs content (the text, inline) or file (a file with the text).", b.Name)
		return
	}

	t.defaults = map[string]cty.Value{}
	if v, ok := r.evalObject(b.Vars, "vars"); ok {
		for k, val := range v {
			if contains(BuiltinTemplateVars, k) {
				r.errf(objectKeyRange(b.Vars, k), "Reserved variable name", "%q is a built-in variable of every template (%s).", k, strings.Join(BuiltinTemplateVars, ", "))
				continue
			}
			if !identRE.MatchString(k) {
				r.errf(objectKeyRange(b.Vars, k), "Invalid variable name", "%q is not a name a template can refer to: letters, digits and '_', starting with a letter.", k)
				continue
			}
			t.defaults[k] = val
		}
		t.Vars = ctyMapJSON(t.defaults)
	}
	if !r.checkTemplateExpr(t) {
		return
	}
	r.cfg.Templates[b.Name] = t
}

// checkTemplateExpr checks the names a template uses and the functions it
// calls, and bounds its loops.
func (r *resolver) checkTemplateExpr(t *Template) bool {
	ok := true
	known := append(append([]string{}, BuiltinTemplateVars...), t.VarNames()...)
	for _, tr := range t.expr.Variables() {
		name := tr.RootName()
		if contains(known, name) { // for directives' own names are not in Variables()
			continue
		}
		rng := tr.SourceRange()
		r.errf(rng, "Unknown template variable", "Template %q uses %q, which is neither built in (%s) nor one of its vars.%s", t.Name, name, strings.Join(BuiltinTemplateVars, ", "), suggestion(name, known))
		ok = false
	}
	if se, isSyntax := t.expr.(hclsyntax.Expression); isSyntax {
		hclsyntax.VisitAll(se, func(n hclsyntax.Node) hcl.Diagnostics {
			switch x := n.(type) {
			case *hclsyntax.FunctionCallExpr:
				if _, pure := pureFunctions[x.Name]; !pure {
					rng := x.NameRange
					r.errf(rng, "Function not available in templates", "Templates may call %s; not %s().%s", strings.Join(PureFunctionNames(), ", "), x.Name, suggestion(x.Name, PureFunctionNames()))
					ok = false
				}
			case *hclsyntax.ForExpr:
				if d := forDepth(x); d > maxTemplateForDepth {
					rng := x.Range()
					r.errf(rng, "Loops nested too deeply", "A template may nest at most %d for directives.", maxTemplateForDepth)
					ok = false
				}
			}
			return nil
		})
	}
	return ok
}

func forDepth(e hclsyntax.Expression) int {
	max := 0
	hclsyntax.VisitAll(e, func(n hclsyntax.Node) hcl.Diagnostics {
		if f, ok := n.(*hclsyntax.ForExpr); ok && f != e {
			if d := forDepth(f); d > max {
				max = d
			}
		}
		return nil
	})
	return max + 1
}

var identRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)

// evalObject evaluates an attribute that must be an object ({ a = 1 }) into
// its values. ok is false when the attribute is absent or wrong.
func (r *resolver) evalObject(expr hcl.Expression, name string) (map[string]cty.Value, bool) {
	if expr == nil {
		return nil, false
	}
	ctx := evalContext(functionsFor(r.budget, r.allowed, r.trusted, "", r.getenv))
	v, diags := expr.Value(ctx)
	r.diags = append(r.diags, diags...)
	if diags.HasErrors() {
		return nil, false
	}
	if v.IsNull() {
		return nil, false
	}
	ty := v.Type()
	if !ty.IsObjectType() && !ty.IsMapType() {
		rng := expr.Range()
		r.errf(rng, "Invalid "+name, "%s is an object of names and values, e.g. { packages = [\"git\"] }.", name)
		return nil, false
	}
	out := map[string]cty.Value{}
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		out[k.AsString()] = e
	}
	return out, true
}

// objectKeyRange finds the range of key k in an object written literally.
func objectKeyRange(expr hcl.Expression, k string) hcl.Range {
	if o, ok := expr.(*hclsyntax.ObjectConsExpr); ok {
		for _, item := range o.Items {
			if v, diags := item.KeyExpr.Value(nil); !diags.HasErrors() && v.Type() == cty.String && v.AsString() == k {
				return item.KeyExpr.Range()
			}
		}
	}
	return expr.Range()
}

func ctyMapJSON(m map[string]cty.Value) json.RawMessage {
	if len(m) == 0 {
		return nil
	}
	obj := cty.ObjectVal(m)
	b, err := ctyjson.Marshal(obj, obj.Type())
	if err != nil {
		return nil
	}
	return b
}

// typeKind groups cty types the way people think of them, to compare a
// variable's value with its default.
func typeKind(t cty.Type) string {
	switch {
	case t == cty.String:
		return "a string"
	case t == cty.Number:
		return "a number"
	case t == cty.Bool:
		return "a bool"
	case t.IsListType() || t.IsTupleType() || t.IsSetType():
		return "a list"
	case t.IsMapType() || t.IsObjectType():
		return "an object"
	}
	return t.FriendlyName()
}

func (r *resolver) resolveCloudInit(b *cloudInitBlock) *CloudInit {
	ci := &CloudInit{Template: b.Template}
	rng := valueRange(b.Body, "template", b.DefRange)
	t, known := r.cfg.Templates[b.Template]
	if !known {
		names := sortedKeys(r.cfg.Templates)
		r.errf(rng, "Unknown template", "No template block is named %q.%s%s", b.Template, suggestion(b.Template, names), knownList("templates", names))
	}
	if t != nil {
		ci.password = t.UsesPassword()
	}
	vars, ok := r.evalObject(b.Vars, "vars")
	if !ok || t == nil {
		return ci
	}
	names := t.VarNames()
	for _, k := range sortedKeys(vars) {
		def, declared := t.defaults[k]
		if !declared {
			r.errf(objectKeyRange(b.Vars, k), "Unknown template variable", "Template %q has no variable %q.%s%s", t.Name, k, suggestion(k, names), knownList("variables of the template", names))
			continue
		}
		if !vars[k].IsNull() && !def.IsNull() && typeKind(vars[k].Type()) != typeKind(def.Type()) {
			r.errf(objectKeyRange(b.Vars, k), "Wrong type for a template variable", "%s of template %q is %s (its default is); this is %s.", k, t.Name, typeKind(def.Type()), typeKind(vars[k].Type()))
		}
	}
	ci.vars = vars
	ci.Vars = ctyMapJSON(vars)
	return ci
}

// CloudInitInput is what a template knows about one VM.
type CloudInitInput struct {
	User              string
	Hostname          string
	SSHAuthorizedKeys []string
	VMID              string
	VMName            string
	// PasswordHash is the SHA-512 crypt hash of the VM's one-time desktop
	// password ("" when it has none): the template's password_hash.
	PasswordHash string
	// UID is the owner's stable uid when the profile has a home, else 0:
	// the template's uid.
	UID int
}

// RenderCloudInit renders the profile's cloud-init template for one VM: the
// template's defaults, overridden by the profile's vars, and the built-ins.
// It returns "" when the profile has no cloud_init block.
func (c *Config) RenderCloudInit(p *Profile, in CloudInitInput) (string, error) {
	if p.CloudInit == nil {
		return "", nil
	}
	t := c.Templates[p.CloudInit.Template]
	if t == nil {
		return "", fmt.Errorf("profile %s: no template %q", p.Name, p.CloudInit.Template)
	}
	vars := map[string]cty.Value{}
	for k, v := range t.defaults {
		vars[k] = v
	}
	for k, v := range p.CloudInit.vars {
		vars[k] = v
	}
	keys := cty.ListValEmpty(cty.String)
	if len(in.SSHAuthorizedKeys) > 0 {
		ks := make([]cty.Value, len(in.SSHAuthorizedKeys))
		for i, k := range in.SSHAuthorizedKeys {
			ks[i] = cty.StringVal(k)
		}
		keys = cty.ListVal(ks)
	}
	vars["user"] = cty.StringVal(in.User)
	vars["hostname"] = cty.StringVal(in.Hostname)
	vars["ssh_authorized_keys"] = keys
	vars["vm_id"] = cty.StringVal(in.VMID)
	vars["vm_name"] = cty.StringVal(in.VMName)
	vars["profile"] = cty.StringVal(p.Name)
	vars["password_hash"] = cty.StringVal(in.PasswordHash)
	vars["uid"] = cty.NumberIntVal(int64(in.UID))
	b := &budget{limit: evalBudgetBytes}
	ctx := &hcl.EvalContext{Variables: vars, Functions: functionsFor(b, nil, false, "", nil)}
	v, diags := t.expr.Value(ctx)
	if diags.HasErrors() {
		return "", fmt.Errorf("render template %s: %s", t.Name, diags.Error())
	}
	v, err := convert.Convert(v, cty.String)
	if err != nil || v.IsNull() || !v.IsKnown() {
		return "", fmt.Errorf("render template %s: the result is not text", t.Name)
	}
	out := v.AsString()
	if len(out) > maxValueBytes {
		return "", fmt.Errorf("render template %s: the result is larger than %d bytes", t.Name, maxValueBytes)
	}
	return out, nil
}
