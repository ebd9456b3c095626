package web

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// stillReadsTables are the files of web that still hold SQL, each to go when
// its owner offers the read: the test fails once a file no longer needs its
// entry, so the list cannot outlive its reason.
var stillReadsTables = map[string]bool{
	// The bot's numbers, until bot.Outbox and bot.Onboarding offer them.
	"console_bot_stats.go": true,
}

var sqlText = regexp.MustCompile(`(?is)\bselect\b.+\bfrom\b|\binsert\s+into\b|\bdelete\s+from\b|\bupdate\s+\w+\s+set\b|\bpragma\s|\bcreate\s+table\b`)

// The console reads no table: every number it shows comes from the package
// that owns the table, through a small interface. No Go file under web/
// (generated templ code aside, tests included) holds SQL.
func TestWebHoldsNoSQL(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_templ.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !sqlText.MatchString(s) {
				return true
			}
			seen[path] = true
			if !stillReadsTables[path] {
				t.Errorf("%s holds SQL: %q", path, strings.Join(strings.Fields(s), " "))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for path := range stillReadsTables {
		if !seen[path] {
			t.Errorf("%s holds no SQL any more: delete its entry in stillReadsTables", path)
		}
	}
}
