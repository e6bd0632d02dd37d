package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// The commands that the README, docs/, the portal and gpuvm's (and
// gpuvmd's) own texts tell people to run must be commands of this CLI: a
// page that says 'gpuvm token create' sends people to a command that does
// not exist.

// repoRoot is the repository, two levels above this package.
const repoRoot = "../.."

// namedCommand is a 'gpuvm …' command a text names: the words after gpuvm
// up to the first flag, placeholder or anything that is not a lower-case
// word, and where.
type namedCommand struct {
	file  string
	line  int
	words []string
}

func (n namedCommand) String() string {
	return fmt.Sprintf("%s:%d: gpuvm %s", n.file, n.line, strings.Join(n.words, " "))
}

// commandWords are the lower-case words after "gpuvm" (group 1), up to a
// flag, a placeholder (NAME, <vm>, {name}, %s, ${…}) or punctuation.
const commandWords = `gpuvm\b((?:[ \t]+[a-z][a-z0-9-]*\b)*)`

var (
	// inShell: gpuvm where a shell runs it — at the start of a line or of
	// a code span (after a prompt "$ "), after ; & | ( or a quote, after
	// "# or:" and ", " in a comment, after sudo or VAR=value — not as an
	// argument of another program (createuser gpuvm, -O gpuvm gpuvm).
	inShell = regexp.MustCompile(`(?m)(?:^[ \t]*(?:\$[ \t]+)?|[;&|(（'"` + "`" + `>:,=][ \t]*|\bsudo[ \t]+|\b[A-Z_][A-Z0-9_]*=\S*[ \t]+)` + commandWords)
	// inJS: gpuvm at the start of a string, or of a parenthesis or a
	// quotation in one ("(gpuvm desktop {name} --pin NNNN)").
	inJS = regexp.MustCompile(`(?:['"` + "`" + `(（]|“)[ \t]*` + commandWords)
	// inGo: in the texts of Go code, a command quoted as 'gpuvm …' (the
	// house style) or in parentheses, an indented example line, a value of
	// a "Label:\tgpuvm …" table, a "$(…)".
	inGo = regexp.MustCompile(`(?m)(?:'|\(|^[ \t]+|\t|\$\()` + commandWords)
	// inGoLead: a string that starts with a command and goes on
	// ("gpuvm desktop " + name, "gpuvm ssh %s"), not a title ("gpuvm
	// manual").
	inGoLead = regexp.MustCompile(`^gpuvm((?:[ \t]+[a-z][a-z0-9-]*)+)[ \t]`)
)

// findCommands is every command text names where at says, with the line
// each is on (line is that of text's start in file).
func findCommands(file string, line int, text string, at *regexp.Regexp) []namedCommand {
	var out []namedCommand
	for _, m := range at.FindAllStringSubmatchIndex(text, -1) {
		words := strings.Fields(text[m[2]:m[3]])
		out = append(out, namedCommand{file: file, line: line + strings.Count(text[:m[0]], "\n"), words: words})
	}
	return out
}

var (
	mdFence = regexp.MustCompile("(?ms)^[ \t]*```[^\n]*\n(.*?)^[ \t]*```")
	mdSpan  = regexp.MustCompile("`([^`\n]+)`")
)

// markdownCommands are the commands in the code of a Markdown file: fenced
// blocks and code spans (prose says "gpuvm creates …").
func markdownCommands(t *testing.T, path string) []namedCommand {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	var out []namedCommand
	lineOf := func(off int) int { return 1 + strings.Count(src[:off], "\n") }
	rest := []byte(src)
	for _, m := range mdFence.FindAllStringSubmatchIndex(src, -1) {
		out = append(out, findCommands(path, lineOf(m[2]), src[m[2]:m[3]], inShell)...)
		for i := m[0]; i < m[1]; i++ { // blank it out, keeping the lines
			if rest[i] != '\n' {
				rest[i] = ' '
			}
		}
	}
	text := string(rest)
	for _, m := range mdSpan.FindAllStringSubmatchIndex(text, -1) {
		out = append(out, findCommands(path, lineOf(m[2]), text[m[2]:m[3]], inShell)...)
	}
	return out
}

// goCommands are the commands in the string literals of a Go file.
func goCommands(t *testing.T, path string) []namedCommand {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []namedCommand
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Errorf("%s: %v", fset.Position(lit.Pos()), err)
			return true
		}
		line := fset.Position(lit.Pos()).Line
		out = append(out, findCommands(path, line, s, inGo)...)
		out = append(out, findCommands(path, line, s, inGoLead)...)
		return true
	})
	return out
}

// namedCommands are the commands README.md, docs/*.md, the portal's
// scripts and the Go code of the CLI and the server (its messages, the
// commands of its answers) name.
func namedCommands(t *testing.T) []namedCommand {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	var out []namedCommand
	for _, p := range append([]string{filepath.Join(repoRoot, "README.md")}, docs...) {
		out = append(out, markdownCommands(t, p)...)
	}
	walk := func(dir, ext string, find func(path string) []namedCommand) {
		n := 0
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ext) || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			n++
			out = append(out, find(path)...)
			return nil
		})
		if err != nil || n == 0 {
			t.Fatalf("%s: %d %s files: %v", dir, n, ext, err)
		}
	}
	walk("pkg/portal/assets", ".js", func(path string) []namedCommand {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return findCommands(path, 1, string(b), inJS)
	})
	for _, dir := range []string{"cmd/gpuvm", "pkg/server"} {
		walk(dir, ".go", func(path string) []namedCommand { return goCommands(t, path) })
	}
	return out
}

// commandPathError says why words are not a command of root: nil when they
// lead to one, with what follows it taken as its arguments.
func commandPathError(root *cobra.Command, words []string) error {
	cur := root
	for _, w := range words {
		var next *cobra.Command
		for _, c := range cur.Commands() {
			if c.Name() == w || c.HasAlias(w) {
				next = c
				break
			}
		}
		if next == nil {
			if !cur.HasSubCommands() || cur.Runnable() && cur.ValidateArgs([]string{w}) == nil {
				return nil // an argument
			}
			var names []string
			for _, c := range cur.Commands() {
				if c.IsAvailableCommand() || c.Name() == "help" {
					names = append(names, c.Name())
				}
			}
			return fmt.Errorf("'%s' has no command %q (it has %s)", cur.CommandPath(), w, strings.Join(names, ", "))
		}
		cur = next
	}
	return nil
}

func newTestRoot() *cobra.Command {
	root := newRoot(func(string) string { return "" }, io.Discard, io.Discard)
	root.InitDefaultHelpCmd()
	return root
}

func TestCommandPathError(t *testing.T) {
	root := newTestRoot()
	for _, tc := range []struct {
		cmd string
		ok  bool
	}{
		{"", true},
		{"create l40s-seat", true},
		{"admin tokens create ann", true},
		{"rm box", true},
		{"help create", true},
		{"admin users create prometheus", true},
		{"token create", false},
		{"admin user create", false},
		{"admin tokens make", false},
		{"admin", true},
	} {
		if err := commandPathError(root, strings.Fields(tc.cmd)); (err == nil) != tc.ok {
			t.Errorf("gpuvm %s: %v, want ok %v", tc.cmd, err, tc.ok)
		}
	}
	// What the test finds in texts.
	cmds := findCommands("x.md", 1, "gpuvm token create\nsudo -u postgres createdb -O gpuvm gpuvm", inShell)
	if len(cmds) != 1 || cmds[0].String() != "x.md:1: gpuvm token create" {
		t.Errorf("in a shell: %q", cmds)
	}
	cmds = findCommands("x.js", 1, `tokenHint: 'Paste one from "gpuvm token create". Sign in to gpuvm', c = 'gpuvm rdp ' + vm.name`, inJS)
	if len(cmds) != 2 || cmds[0].String() != "x.js:1: gpuvm token create" || cmds[1].String() != "x.js:1: gpuvm rdp" {
		t.Errorf("in JS: %q", cmds)
	}
	cmds = findCommands("x.go", 1, "Give them a token with 'gpuvm token create %s' (gpuvm tokens list); gpuvm waits\n  gpuvm admin tokens create ann -q", inGo)
	if len(cmds) != 3 || cmds[0].String() != "x.go:1: gpuvm token create" || cmds[1].String() != "x.go:1: gpuvm tokens list" || cmds[2].String() != "x.go:2: gpuvm admin tokens create ann" {
		t.Errorf("in Go: %q", cmds)
	}
	for text, want := range map[string]int{"gpuvm desktop ": 1, "gpuvm ssh %s": 1, "gpuvm manual": 0, "gpuvm waits\ngpuvm ssh x": 0} {
		if got := findCommands("x.go", 1, text, inGoLead); len(got) != want {
			t.Errorf("%q starts with %q", text, got)
		}
	}
}

// TestNamedCommandsExist: every 'gpuvm …' command named in README.md,
// docs/*.md, the portal's scripts and the texts of the CLI and the server
// is a command of this CLI.
func TestNamedCommandsExist(t *testing.T) {
	root := newTestRoot()
	seen := map[string]bool{} // file extension, first word
	for _, c := range namedCommands(t) {
		if len(c.words) > 0 {
			seen[filepath.Ext(c.file)+" "+c.words[0]] = true
		}
		if err := commandPathError(root, c.words); err != nil {
			t.Errorf("%s: %v", c, err)
		}
	}
	// The search finds commands in each kind of text: the portal's
	// 'gpuvm rdp NAME', the README's and the CLI's own.
	for _, want := range []string{".md create", ".md rdp", ".js rdp", ".js desktop", ".go credentials", ".go admin", ".go desktop"} {
		if !seen[want] {
			t.Errorf("found no 'gpuvm %s' in a %s file: the search misses commands", strings.Fields(want)[1], strings.Fields(want)[0])
		}
	}
}
