package config

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
)

// The ANSI sequences hcl's text writer uses in colour mode.
const (
	ansiHighlight = "\x1b[1;4m"
	ansiReset     = "\x1b[0m"
)

// WriteDiagnostics writes diags with hcl's diagnostic text writer, as plain
// text fit for any terminal, file or log:
//
//	Error: Invalid size
//
//	  on configs/lab/profiles.hcl:12:12, in profile "student":
//	  12:   memory = "8GB"
//	                 ^^^^^
//
//	memory: "8GB": sizes use binary units; write 8GiB.
//
// The location is file:line:column, and the offending text is underlined with
// carets (hcl's writer underlines with terminal escapes, which are turned into
// a caret line here). width wraps the explanations (0: 78).
func (l *Loader) WriteDiagnostics(w io.Writer, diags hcl.Diagnostics, width uint) error {
	if width == 0 {
		width = 78
	}
	var buf bytes.Buffer
	tw := hcl.NewDiagnosticTextWriter(&buf, l.Files(), width, true)
	for _, d := range diags {
		buf.Reset()
		if err := tw.WriteDiagnostic(d); err != nil {
			return err
		}
		if _, err := io.WriteString(w, plainDiagnostic(d, buf.String())); err != nil {
			return err
		}
	}
	return nil
}

// plainDiagnostic rewrites one diagnostic as hcl's writer rendered it in
// colour: escapes become a caret line, "on FILE line N" becomes
// "on FILE:N:COL".
func plainDiagnostic(d *hcl.Diagnostic, text string) string {
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	where := ""
	if d.Subject != nil {
		where = fmt.Sprintf("  on %s line %d", d.Subject.Filename, d.Subject.Start.Line)
	}
	for sc.Scan() {
		line := sc.Text()
		if where != "" && strings.HasPrefix(line, where) {
			line = fmt.Sprintf("  on %s:%d:%d", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column) + line[len(where):]
		}
		if i := strings.Index(line, ansiHighlight); i >= 0 {
			before := line[:i]
			rest := line[i+len(ansiHighlight):]
			lit, after, _ := strings.Cut(rest, ansiReset)
			out.WriteString(stripANSI(before + lit + after))
			out.WriteByte('\n')
			out.WriteString(caretLine(stripANSI(before), lit))
			out.WriteByte('\n')
			continue
		}
		out.WriteString(stripANSI(line))
		out.WriteByte('\n')
	}
	return out.String()
}

// caretLine underlines lit, which follows before on a snippet line.
func caretLine(before, lit string) string {
	var b strings.Builder
	for _, r := range before {
		if r == '\t' {
			b.WriteByte('\t')
		} else {
			b.WriteByte(' ')
		}
	}
	n := utf8.RuneCountInString(strings.TrimRight(lit, " \t"))
	if n == 0 {
		n = 1
	}
	b.WriteString(strings.Repeat("^", n))
	return strings.TrimRight(b.String(), " ")
}

func stripANSI(s string) string {
	if !strings.Contains(s, "\x1b[") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] == ';' || (s[j] >= '0' && s[j] <= '9')) {
				j++
			}
			if j < len(s) && s[j] == 'm' {
				i = j
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
