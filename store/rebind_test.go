package store_test

import (
	"strconv"
	"strings"
	"testing"

	"switchyard/store"
)

func TestRebind(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`select 1`, `select 1`},
		{`select * from t where a = ? and b in (?, ?)`, `select * from t where a = $1 and b in ($2, $3)`},
		{`select '?', "?x", ? -- what?
		from t /* a ? here */ where c = ?`, `select '?', "?x", $1 -- what?
		from t /* a ? here */ where c = $2`},
		{`select 'it''s ?', ?`, `select 'it''s ?', $1`},
		{`select $$ ? $$, $q$ ? $q$, ?`, `select $$ ? $$, $q$ ? $q$, $1`},
		{`select $1, ?`, `select $1, $1`},
		{`select 'unterminated ?`, `select 'unterminated ?`},
	} {
		if got := store.Rebind(c.in); got != c.want {
			t.Errorf("Rebind(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

// FuzzRebind checks that rebinding only ever replaces placeholders: the text
// with every $n turned back into ? is the input.
func FuzzRebind(f *testing.F) {
	for _, s := range []string{`select ? from t where a = '?' and b = ?`, `--?` + "\n?", `/*?*/?`, `$a$?$a$?`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.Contains(s, "$") {
			t.Skip("a $ in the input makes $n ambiguous to undo")
		}
		got := store.Rebind(s)
		// Undo it: the k-th $ of the output (the input has none) must be $k,
		// read as exactly that many digits, since a digit may follow a ?.
		var back strings.Builder
		n := 1
		for i := 0; i < len(got); {
			if got[i] != '$' {
				back.WriteByte(got[i])
				i++
				continue
			}
			want := strconv.Itoa(n)
			if !strings.HasPrefix(got[i+1:], want) {
				t.Fatalf("Rebind(%q) = %q: placeholder %d is not $%s", s, got, n, want)
			}
			back.WriteByte('?')
			i += 1 + len(want)
			n++
		}
		if back.String() != s {
			t.Fatalf("Rebind(%q) = %q, which is not the input with placeholders renamed", s, got)
		}
	})
}

func TestRedact(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"./switchyard.db", "./switchyard.db"},
		{"postgres://sw:s3cret@db.internal:5432/sw?sslmode=require", "postgres://sw:xxxxx@db.internal:5432/sw?sslmode=require"},
		{"postgresql://sw@db/sw?password=s3cret&sslmode=disable", "postgresql://sw@db/sw?password=xxxxx&sslmode=disable"},
		{"postgres://db/sw", "postgres://db/sw"},
	} {
		got := store.Redact(c.in)
		if got != c.want || strings.Contains(got, "s3cret") {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
