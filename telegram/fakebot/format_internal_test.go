package fakebot

import (
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/mymmrac/telego"
)

// FuzzFormatText checks that no text, in any parse mode or with any
// explicit entities, makes the parser panic (a handler runs with the fake's
// lock held) and that what it accepts is well formed: valid UTF-8, entities
// inside the text, on character bounds, sorted as Telegram sorts them.
//
//	go test -run '^$' -fuzz FuzzFormatText -fuzztime 60s ./telegram/fakebot/
func FuzzFormatText(f *testing.F) {
	for _, seed := range []string{
		"<b>bold <i>it</i></b> <a href=\"tg://user?id=1\">x</a> &lt;&#x1F600;",
		"<pre><code class=\"language-go\">x</code></pre><blockquote expandable>q</blockquote>",
		"*b _i_ ~s~ ||sp||* [l](http://x.com) ![e](tg://emoji?id=5) `c` ```go\nx```",
		"**>q\n>r||\n>s", ">a\n>b\nc", "a\\.b\\", "*a\n", "[x](", "<a href='x", "&#xd83d;&#xde00;",
		"*bold* _it_ `c` [l](u)", "  \r\n\t", "😀 @user /cmd #tag $USD https://t.me/x",
		// Unicode lower-casing changes these lengths; Telegram lower-cases ASCII only.
		"<a href=\"tg:ȺȺȺȺȺ\">x</a>", "<a href=\"ȺȺ://x.com\">x</a>", "<İ>x</İ>", "HTTPȺ://x.com \u212aHTTPS://y.com",
	} {
		for _, mode := range []string{"HTML", "MarkdownV2", "Markdown", ""} {
			f.Add(seed, mode, "")
		}
		f.Add(seed, "", `[{"type":"bold","offset":0,"length":3},{"type":"pre","offset":1,"length":2,"language":"go"},`+
			`{"type":"text_link","offset":2,"length":1,"url":"x.com"},{"type":"text_mention","offset":0,"length":1,"user":{"id":1}}]`)
	}
	users := func(id int64) (telego.User, bool) { return telego.User{ID: id, FirstName: "U"}, id == 1 }
	f.Fuzz(func(t *testing.T, text, mode, explicit string) {
		out, ents, err := formatText(text, mode, explicit, users)
		if err != nil {
			if err.code != 400 {
				t.Fatalf("error %d %q", err.code, err.description)
			}
			return
		}
		if !utf8.ValidString(out) || out == "" {
			t.Fatalf("text %q", out)
		}
		units := utf16.Encode([]rune(out))
		// bounds[i] is whether UTF-16 offset i starts a character.
		bounds := make([]bool, len(units)+1)
		n := 0
		for _, r := range out {
			bounds[n] = true
			n += utf16.RuneLen(r)
		}
		bounds[n] = true
		for i, e := range ents {
			if e.Length <= 0 || e.Offset < 0 || e.Offset+e.Length > len(units) || !bounds[e.Offset] || !bounds[e.Offset+e.Length] {
				t.Fatalf("entity %+v in %q (%d units)", e, out, len(units))
			}
			if i > 0 {
				p := ents[i-1]
				if p.Offset > e.Offset || p.Offset == e.Offset && p.Length < e.Length {
					t.Fatalf("entities out of order: %+v then %+v", p, e)
				}
			}
		}
	})
}
