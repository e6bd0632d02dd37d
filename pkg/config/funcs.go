package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// Functions. Every file is evaluated with a small set of pure functions; none
// reads a file, the environment, the clock or the network. Two functions that
// do read the host, env() and file(), exist only when the admin opts in with
// server { allow_functions = ["env", "file"] } in a configuration loaded from
// disk; text that did not come from the configuration directory (profiles sent
// through the API, the fuzzer) never gets them.
//
// Every call is charged to a budget: a function whose result would be larger
// than maxValueBytes, or a load whose function results add up to more than
// evalBudgetBytes, fails with a diagnostic instead of eating memory. Together
// with the ban on for expressions (see walk.go) this keeps evaluation linear in
// the size of the text.

const (
	maxValueBytes   = 1 << 20  // one function result
	evalBudgetBytes = 16 << 20 // all function results of one load or render
	maxFormatWidth  = 1024     // width and precision in format()
)

// pureFunctions are available everywhere.
var pureFunctions = map[string]function.Function{
	"upper":      stdlib.UpperFunc,
	"lower":      stdlib.LowerFunc,
	"title":      stdlib.TitleFunc,
	"trimspace":  stdlib.TrimSpaceFunc,
	"trimprefix": stdlib.TrimPrefixFunc,
	"trimsuffix": stdlib.TrimSuffixFunc,
	"format":     stdlib.FormatFunc,
	"join":       stdlib.JoinFunc,
	"split":      stdlib.SplitFunc,
	"replace":    stdlib.ReplaceFunc,
	"concat":     stdlib.ConcatFunc,
	"length":     stdlib.LengthFunc,
	"contains":   stdlib.ContainsFunc,
	"min":        stdlib.MinFunc,
	"max":        stdlib.MaxFunc,
}

// gatedFunctions read the host and need server.allow_functions.
var gatedFunctions = []string{"env", "file"}

// PureFunctionNames lists the functions every configuration may call.
func PureFunctionNames() []string {
	names := make([]string, 0, len(pureFunctions))
	for n := range pureFunctions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// budget counts the bytes that function calls produced.
type budget struct{ used, limit int }

var errBudget = errors.New("the configuration asks for too much work: its function results exceed 16 MiB in all")

func (b *budget) charge(n int) error {
	if n > maxValueBytes {
		return fmt.Errorf("the result would be %d bytes; one value may be at most %d", n, maxValueBytes)
	}
	b.used += n
	if b.used > b.limit {
		return errBudget
	}
	return nil
}

// valueSize estimates the memory a value takes: string bytes plus a little for
// every element.
func valueSize(v cty.Value) int {
	if v.IsMarked() {
		v, _ = v.Unmark()
	}
	if !v.IsKnown() || v.IsNull() {
		return 8
	}
	ty := v.Type()
	switch {
	case ty == cty.String:
		return len(v.AsString()) + 8
	case ty.IsListType() || ty.IsSetType() || ty.IsTupleType() || ty.IsMapType() || ty.IsObjectType():
		n := 8
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			if ty.IsMapType() || ty.IsObjectType() {
				n += valueSize(k)
			}
			n += valueSize(e)
		}
		return n
	default:
		return 16
	}
}

// bounded wraps f so that it checks its arguments with pre (if any) and
// charges its result to b.
func bounded(f function.Function, b *budget, pre func(args []cty.Value) error) function.Function {
	return function.New(&function.Spec{
		Description: f.Description(),
		Params:      f.Params(),
		VarParam:    f.VarParam(),
		Type: func(args []cty.Value) (cty.Type, error) {
			return f.ReturnTypeForValues(args)
		},
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if pre != nil {
				if err := pre(args); err != nil {
					return cty.DynamicVal, err
				}
			}
			v, err := f.Call(args)
			if err != nil {
				return cty.DynamicVal, err
			}
			if err := b.charge(valueSize(v)); err != nil {
				return cty.DynamicVal, err
			}
			return v, nil
		},
	})
}

func knownString(v cty.Value) (string, bool) {
	if v.IsMarked() {
		v, _ = v.Unmark()
	}
	if !v.IsKnown() || v.IsNull() || v.Type() != cty.String {
		return "", false
	}
	return v.AsString(), true
}

var formatVerbRE = regexp.MustCompile(`%[-+# 0]*(\[[0-9]+\])?([0-9*]*)(\.([0-9*]*))?`)

// checkFormat refuses widths and precisions that would make format() build
// huge strings ("%999999999d").
func checkFormat(args []cty.Value) error {
	if len(args) == 0 {
		return nil
	}
	f, ok := knownString(args[0])
	if !ok {
		return nil
	}
	for _, m := range formatVerbRE.FindAllStringSubmatch(f, -1) {
		for _, num := range []string{m[2], m[4]} {
			if strings.Contains(num, "*") {
				return fmt.Errorf("format: * widths are not supported")
			}
			if num == "" {
				continue
			}
			if n, err := strconv.Atoi(num); err != nil || n > maxFormatWidth {
				return fmt.Errorf("format: widths and precisions are at most %d", maxFormatWidth)
			}
		}
	}
	return nil
}

// checkReplace refuses a replace() whose result would be too large before it
// is built.
func checkReplace(args []cty.Value) error {
	if len(args) != 3 {
		return nil
	}
	s, ok1 := knownString(args[0])
	old, ok2 := knownString(args[1])
	repl, ok3 := knownString(args[2])
	if !ok1 || !ok2 || !ok3 {
		return nil
	}
	n := strings.Count(s, old)
	if size := len(s) + n*(len(repl)-len(old)); size > maxValueBytes || (n > 0 && len(repl) > maxValueBytes) {
		return fmt.Errorf("the result would be larger than %d bytes", maxValueBytes)
	}
	return nil
}

// functionsFor builds the function table of one evaluation. allowed lists the
// gated functions the admin opted into; baseDir is where file() resolves
// relative paths ("" where the text did not come from a file on disk).
func functionsFor(b *budget, allowed map[string]bool, trusted bool, baseDir string, getenv func(string) string) map[string]function.Function {
	fns := make(map[string]function.Function, len(pureFunctions)+len(gatedFunctions))
	for name, f := range pureFunctions {
		var pre func([]cty.Value) error
		switch name {
		case "format":
			pre = checkFormat
		case "replace":
			pre = checkReplace
		}
		fns[name] = bounded(f, b, pre)
	}
	why := func(name, what string) error {
		if !trusted {
			return fmt.Errorf("%s() %s, which only configuration files on disk may do", name, what)
		}
		return fmt.Errorf("%s() %s, which is off: to allow it, add %q to server { allow_functions = [...] }", name, what, name)
	}
	fns["env"] = bounded(function.New(&function.Spec{
		Description: "Reads an environment variable of the process that loads the configuration.",
		Params:      []function.Parameter{{Name: "name", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if !trusted || !allowed["env"] {
				return cty.DynamicVal, why("env", "reads the environment")
			}
			return cty.StringVal(getenv(args[0].AsString())), nil
		},
	}), b, nil)
	fns["file"] = bounded(function.New(&function.Spec{
		Description: "Reads a text file; a relative path is relative to the file that calls file().",
		Params:      []function.Parameter{{Name: "path", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if !trusted || !allowed["file"] {
				return cty.DynamicVal, why("file", "reads a file")
			}
			p := args[0].AsString()
			if !filepath.IsAbs(p) {
				p = filepath.Join(baseDir, p)
			}
			data, err := readLimited(p, maxValueBytes)
			if err != nil {
				return cty.DynamicVal, err
			}
			return cty.StringVal(string(data)), nil
		},
	}), b, nil)
	return fns
}

// readLimited reads a regular file of at most limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes; at most %d are read", path, fi.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}

// evalContext is the context every attribute of one file is evaluated in: no
// variables, the functions above.
func evalContext(fns map[string]function.Function) *hcl.EvalContext {
	return &hcl.EvalContext{Functions: fns}
}
