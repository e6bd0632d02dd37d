// Package i18n says in the reader's language the sentences gpuvmd writes
// in English: the policy's and the scheduler's reasons (stored with a VM
// as it waits or fails), the estimated start's note, the API's refusals,
// alert summaries and the review's notes. gpuvmd localises them at the
// edge of the API, by the request's language (the portal's language
// cookie, else Accept-Language, as GET /v1/rules); the CLI, which sends
// neither, reads English.
//
// The word table (zh.go) is a list of sentence patterns: the English
// sentence with its values as {name}s, and its Chinese. A sentence no
// pattern matches is said as it is, in English: the portal's test of
// every page in Chinese (pkg/portal/zh_browser_test.go) finds those.
package i18n

import (
	"regexp"
	"strings"
)

// Languages.
const (
	English = "en"
	Chinese = "zh-CN"
)

// A placeholder of a pattern is {name} (any text, kept as it is), {name*}
// (a sentence or word, itself said in the language), {name,*} (a list
// joined by ", ", each item said in the language) or {name~} (a duration
// such as 3h20m or 45s).
var placeholder = regexp.MustCompile(`\{(\w+)(\*|,\*|~)?\}`)

type pattern struct {
	re    *regexp.Regexp
	names []string
	kinds []string
	out   string
}

// compile makes a pattern of an English sentence with placeholders and
// its translation (which names the same placeholders, as {name}).
func compile(en, out string) pattern {
	p := pattern{out: out}
	var b strings.Builder
	b.WriteString("^")
	last := 0
	for _, m := range placeholder.FindAllStringSubmatchIndex(en, -1) {
		b.WriteString(regexp.QuoteMeta(en[last:m[0]]))
		name, kind := en[m[2]:m[3]], ""
		if m[4] >= 0 {
			kind = en[m[4]:m[5]]
		}
		p.names, p.kinds = append(p.names, name), append(p.kinds, kind)
		b.WriteString("(.+?)")
		last = m[1]
	}
	b.WriteString(regexp.QuoteMeta(en[last:]))
	b.WriteString("$")
	p.re = regexp.MustCompile(b.String())
	return p
}

// table is a language's patterns, in the order they are tried.
type table struct {
	patterns []pattern
	// joins say how a language writes what English joins with "; " and
	// ", " and ends with ".".
	semicolon, comma string
	dur              func(string) string
}

var tables = map[string]*table{}

// Text says s, a sentence gpuvmd wrote in English, in lang: English (or an
// unknown language) as it is; else by the first pattern that matches all
// of it; else, when it joins sentences with "; ", each of them; else as it
// is.
func Text(lang, s string) string {
	t := tables[lang]
	if t == nil || s == "" {
		return s
	}
	out, _ := t.say(s, 0)
	return out
}

// say is Text in t; ok is false when no pattern matched.
func (t *table) say(s string, depth int) (string, bool) {
	if depth > 6 {
		return s, false
	}
	for i := range t.patterns {
		p := &t.patterns[i]
		m := p.re.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		out := p.out
		for j, name := range p.names {
			v := m[j+1]
			switch p.kinds[j] {
			case "*":
				v, _ = t.say(v, depth+1)
			case ",*":
				items := strings.Split(v, ", ")
				for k := range items {
					items[k], _ = t.say(items[k], depth+1)
				}
				v = strings.Join(items, t.comma)
			case "~":
				v = t.dur(v)
			}
			out = strings.ReplaceAll(out, "{"+name+"}", v)
		}
		return out, true
	}
	if durationPart.ReplaceAllString(s, "") == "" {
		return t.dur(s), true
	}
	if parts := strings.Split(s, "; "); len(parts) > 1 {
		ok := true
		for k := range parts {
			var said bool
			parts[k], said = t.say(parts[k], depth+1)
			ok = ok && said
		}
		return strings.Join(parts, t.semicolon), ok
	}
	return s, false
}

// durationPart is one part of a duration as gpuvm writes it: 3h, 20m, 45s,
// 2d.
var durationPart = regexp.MustCompile(`(\d+(?:\.\d+)?)(d|h|m|s)`)
