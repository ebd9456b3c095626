package migrations

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// sharedTables are the tables a second package tree still reads, with the
// tree: each must go once its owner offers the read. The test fails when an
// entry is no longer needed, so the list cannot outlive its reason.
var sharedTables = map[string]string{}

// Each table has one owning package: outside this folder only one package
// tree's code (a package and its test kits, tests aside) names it in SQL,
// so grepping a table's name leads to the one package that writes and reads
// it, plus its migration.
func TestEveryTableHasOneOwner(t *testing.T) {
	t.Parallel()
	tables := declaredTables(t)
	users := tableUsers(t, "..", tables)
	for _, table := range tables {
		trees := users[table]
		if extra, ok := sharedTables[table]; ok {
			if !slices.Contains(trees, extra) {
				t.Errorf("%s: %s no longer reads it: delete its entry in sharedTables", table, extra)
			}
			trees = slices.DeleteFunc(slices.Clone(trees), func(s string) bool { return s == extra })
		}
		if len(trees) > 1 {
			t.Errorf("%s is named in the SQL of %d package trees, %v; one package owns a table and the others ask it", table, len(trees), trees)
		}
	}
	if len(users) == 0 {
		t.Fatal("no table found in any package: the scan is broken")
	}
}

var createTable = regexp.MustCompile(`(?i)\bcreate\s+table\s+(?:if\s+not\s+exists\s+)?([a-z_][a-z0-9_]*)`)

// declaredTables lists the tables the migrations create.
func declaredTables(t *testing.T) []string {
	t.Helper()
	var tables []string
	entries, err := fs.Glob(FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range entries {
		b, err := fs.ReadFile(FS, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range createTable.FindAllStringSubmatch(string(b), -1) {
			tables = append(tables, strings.ToLower(m[1]))
		}
	}
	sort.Strings(tables)
	return slices.Compact(tables)
}

// tableUsers maps each table to the package trees (the first folder under
// root, "." for the main package; under bot/, the second, for bot/backend
// and bot/onboarding each own their tables) whose non-test Go code names it in a
// string: after from, into, update, join or table, or as the whole string
// (a table handed to store.Stamped).
func tableUsers(t *testing.T, root string, tables []string) map[string][]string {
	t.Helper()
	known := map[string]bool{}
	for _, tb := range tables {
		known[tb] = true
	}
	inSQL := regexp.MustCompile(`(?i)\b(?:from|into|update|join|table)\s+([a-z_][a-z0-9_]*)`)
	found := map[string]map[string]bool{}
	add := func(table, tree string) {
		if found[table] == nil {
			found[table] = map[string]bool{}
		}
		found[table][tree] = true
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "migrations") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		tree := "."
		if i := strings.IndexRune(rel, filepath.Separator); i > 0 {
			tree = rel[:i]
		}
		if tree == "bot" {
			// bot/backend or bot/onboarding, with their test-helper packages.
			tree = strings.Join(strings.SplitN(filepath.ToSlash(rel), "/", 3)[:2], "/")
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
			if err != nil {
				return true
			}
			if known[s] {
				add(s, tree)
			}
			for _, m := range inSQL.FindAllStringSubmatch(s, -1) {
				if name := strings.ToLower(m[1]); known[name] {
					add(name, tree)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for table, trees := range found {
		for tree := range trees {
			out[table] = append(out[table], tree)
		}
		sort.Strings(out[table])
	}
	return out
}
