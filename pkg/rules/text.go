package rules

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Text writes the rules as plain text for a terminal of width columns
// (at least 20): each section's title underlined, each sentence a
// paragraph that starts with "- ", wrapped at spaces and, in Chinese,
// between characters.
func Text(doc api.Rules, width int) string {
	width = max(width, 20)
	var b strings.Builder
	for i, s := range doc.Sections {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(s.Title + "\n")
		b.WriteString(strings.Repeat("=", min(displayWidth(s.Title), width)) + "\n")
		for _, st := range s.Sentences {
			for j, line := range Wrap(st.Text, width-2) {
				if j == 0 {
					b.WriteString("- " + line + "\n")
				} else {
					b.WriteString("  " + line + "\n")
				}
			}
		}
	}
	return b.String()
}

// wide reports whether r takes two columns (East Asian wide and
// full-width characters).
func wide(r rune) bool {
	return r >= 0x1100 && (r <= 0x115f || r == 0x2329 || r == 0x232a ||
		(r >= 0x2e80 && r <= 0xa4cf && r != 0x303f) || (r >= 0xac00 && r <= 0xd7a3) ||
		(r >= 0xf900 && r <= 0xfaff) || (r >= 0xfe30 && r <= 0xfe4f) || (r >= 0xff00 && r <= 0xff60) ||
		(r >= 0xffe0 && r <= 0xffe6) || (r >= 0x20000 && r <= 0x3fffd))
}

func displayWidth(s string) int {
	n := 0
	for _, r := range s {
		if wide(r) {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// noLineStart are the characters a line may not start with (closing
// punctuation, Chinese and Western).
const noLineStart = "，。、；：！？）》」』”’,.;:!?)"

// Wrap breaks text into lines of at most width columns: at spaces, and
// between two wide characters (where Chinese breaks), never before closing
// punctuation. A word longer than width gets a line of its own.
func Wrap(text string, width int) []string {
	// Tokens: a run of narrow non-space characters is one token; each wide
	// character is one; spaces separate and are kept as a flag.
	type token struct {
		s          string
		spaceAfter bool
	}
	var toks []token
	var cur strings.Builder
	flush := func(space bool) {
		if cur.Len() > 0 {
			toks = append(toks, token{cur.String(), space})
			cur.Reset()
		} else if space && len(toks) > 0 {
			toks[len(toks)-1].spaceAfter = true
		}
	}
	for _, r := range text {
		switch {
		case unicode.IsSpace(r):
			flush(true)
		case wide(r):
			flush(false)
			toks = append(toks, token{string(r), false})
		case strings.ContainsRune(noLineStart, r) && cur.Len() == 0 && len(toks) > 0 && !toks[len(toks)-1].spaceAfter:
			// Closing punctuation sticks to what it closes.
			toks[len(toks)-1].s += string(r)
		default:
			cur.WriteRune(r)
		}
	}
	flush(false)
	// Wide closing punctuation sticks to the token before it, too.
	var merged []token
	for _, t := range toks {
		r, _ := utf8.DecodeRuneInString(t.s)
		if n := len(merged); n > 0 && !merged[n-1].spaceAfter && strings.ContainsRune(noLineStart, r) {
			merged[n-1].s += t.s
			merged[n-1].spaceAfter = t.spaceAfter
			continue
		}
		merged = append(merged, t)
	}
	var lines []string
	var line strings.Builder
	lineW := 0
	sep := false // a space is owed before the next token
	for _, t := range merged {
		w := displayWidth(t.s)
		need := w
		if sep {
			need++
		}
		if lineW > 0 && lineW+need > width {
			lines = append(lines, line.String())
			line.Reset()
			lineW, sep, need = 0, false, w
		}
		if sep {
			line.WriteByte(' ')
		}
		line.WriteString(t.s)
		lineW += need
		sep = t.spaceAfter
	}
	if line.Len() > 0 {
		lines = append(lines, line.String())
	}
	return lines
}
