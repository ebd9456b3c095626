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

var sqlText = regexp.MustCompile(`(?is)\bselect\b.+\bfrom\b|\binsert\s+into\b|\bdelete\s+from\b|\bupdate\s+\w+\s+set\b|\bpragma\s|\bcreate\s+table\b`)

// databaseCalls are the methods of database/sql's DB, Tx and Conn that run
// a statement: web calls none, whatever builds the text.
var databaseCalls = map[string]bool{
	"Exec": true, "ExecContext": true, "Query": true, "QueryContext": true, "QueryRow": true, "QueryRowContext": true,
	"Prepare": true, "PrepareContext": true,
}

// The console reads no table: every number it shows comes from the package
// that owns the table, through a small interface. No Go file under web/, in
// any of its directories (generated templ code aside, tests included),
// holds SQL text or runs a statement (a transaction an owner opens, as
// backend.Outbox.Tx, may be passed back to it).
func TestWebHoldsNoSQL(t *testing.T) {
	t.Parallel()
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_templ.go") {
			return err
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				if s, err := strconv.Unquote(n.Value); err == nil && sqlText.MatchString(s) {
					t.Errorf("%s holds SQL: %q", fset.Position(n.Pos()), strings.Join(strings.Fields(s), " "))
				}
			case *ast.CallExpr:
				// url.URL.Query() takes no argument; a statement needs its text.
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && databaseCalls[sel.Sel.Name] && len(n.Args) > 0 {
					t.Errorf("%s runs a statement: %s(…)", fset.Position(n.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 20 {
		t.Fatalf("read %d Go files under web/: the walk does not see the package", files)
	}
}
