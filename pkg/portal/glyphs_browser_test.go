package portal_test

import (
	"strings"
	"time"
)

// cjkFontPackage is the Debian package that gives the browser tests a font
// for Simplified Chinese (scripts/setup-host.sh installs it).
const cjkFontPackage = "fonts-wqy-microhei"

// glyphCheck draws, on a canvas, every Han character of the page's text in
// the font of the element that holds it (its family, weight and style; a
// fixed size), and compares the pixels with those of a codepoint no font
// has (U+0378, unassigned): the same pixels are the missing-glyph box
// ("tofu"), not the character. Two controls come first, in the body's
// font: "A" must differ from the box, and U+0379 (unassigned too) must be
// the box, else the comparison sees nothing and the page's answer means
// nothing. The answer: how many distinct characters were drawn, the
// controls' failure if any, how many were drawn as the box, the first 20
// of those, and the text and font family of the first element holding one.
const glyphCheck = `(() => {
  const size = 48, canvas = document.createElement('canvas');
  canvas.width = canvas.height = size * 2;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  const draw = (font, s) => {
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.font = font; ctx.fillStyle = '#000'; ctx.textBaseline = 'alphabetic';
    ctx.fillText(s, size / 2, size * 1.5);
    return ctx.getImageData(0, 0, canvas.width, canvas.height).data;
  };
  const same = (a, b) => { for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false; return true; };
  const fontOf = (cs) => cs.fontStyle + ' ' + cs.fontWeight + ' ' + size + 'px ' + cs.fontFamily;
  const boxes = new Map(); // font -> the missing-glyph box's pixels
  const box = (font) => { if (!boxes.has(font)) boxes.set(font, draw(font, '\u0378')); return boxes.get(font); };
  const body = fontOf(getComputedStyle(document.body));
  let broken = '';
  if (same(draw(body, 'A'), box(body))) broken = '"A" is drawn as the missing-glyph box in ' + body;
  else if (!same(draw(body, '\u0379'), box(body))) broken = 'U+0379 (unassigned) is not drawn as the box U+0378 is, in ' + body;
  const han = /\p{Script=Han}/gu, done = new Set(), chars = new Set(), missing = [];
  let text = '', family = '';
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n; (n = walk.nextNode());) {
    const found = n.data.match(han);
    if (!found || !n.parentElement) continue;
    const cs = getComputedStyle(n.parentElement), font = fontOf(cs);
    for (const ch of found) {
      if (done.has(font + ch)) continue;
      done.add(font + ch); chars.add(ch);
      if (same(draw(font, ch), box(font))) {
        if (!missing.includes(ch)) missing.push(ch);
        if (!text) { text = n.parentElement.textContent.trim().slice(0, 60); family = cs.fontFamily; }
      }
    }
  }
  return {chars: chars.size, broken, missing: missing.length,
    sample: missing.slice(0, 20).join(''), text, family};
})()`

// glyphs fails the test when the page in view is in Chinese and its Chinese
// text is drawn as missing-glyph boxes: a screenshot of a page without a
// font for it shows rows of empty boxes, while its text, read from the
// DOM, is right.
func (b *browser) glyphs(name string) {
	b.t.Helper()
	var lang string
	b.eval(`document.documentElement.lang`, &lang)
	if !strings.HasPrefix(lang, "zh") {
		return
	}
	var r struct {
		Chars, Missing               int
		Broken, Sample, Text, Family string
	}
	start := time.Now()
	b.eval(glyphCheck, &r)
	switch {
	case r.Broken != "":
		b.t.Errorf("%s: the glyph check cannot tell a character from the missing-glyph box: %s", name, r.Broken)
	case r.Chars == 0:
		b.t.Errorf("%s: the page is in %s but has no Chinese characters to check", name, lang)
	case r.Missing > 0:
		b.t.Errorf("%s: %d of the page's %d distinct Chinese characters are drawn as empty boxes (%q…), e.g. in %q, font-family %s: "+
			"no font here has them: apt-get install %s (scripts/setup-host.sh installs it)", name, r.Missing, r.Chars, r.Sample, r.Text, r.Family, cjkFontPackage)
	default:
		b.t.Logf("%s: %d distinct Chinese characters, all drawn with real glyphs (checked in %v)", name, r.Chars, time.Since(start).Round(time.Millisecond))
	}
}
