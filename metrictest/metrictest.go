// Package metrictest helps tests check that every value a metric's label can
// take has its series from the start: the label values present on the
// default registry, and the string constants of a type as a package's
// source declares them, to compare with the list a metric is declared from.
// Value reads one series, for a test of what a gauge or counter says.
package metrictest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// LabelValues returns the values label takes across the series of the
// metric family name on the default registry.
func LabelValues(t testing.TB, name, label string) []string {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	return out
}

// Value returns the value of the series of the counter or gauge family name
// on the default registry whose labels are exactly labels (name, value,
// name, value…), and whether that series exists.
func Value(t testing.TB, name string, labels ...string) (float64, bool) {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("metrictest.Value(%s): labels come in name, value pairs: %q", name, labels)
	}
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels)/2 {
				continue
			}
			for _, l := range m.GetLabel() {
				if !hasPair(labels, l.GetName(), l.GetValue()) {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			}
			t.Fatalf("metrictest.Value(%s): neither a counter nor a gauge", name)
		}
	}
	return 0, false
}

func hasPair(labels []string, name, value string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		if labels[i] == name && labels[i+1] == value {
			return true
		}
	}
	return false
}

// Constants returns the string constants of type typ declared in file (a
// path relative to the test's package), by name, so a test can tell when a
// new one is missing from the list a metric is declared from.
func Constants(t testing.TB, file, typ string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
				continue
			}
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s: %s is not a string literal", file, name.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out[name.Name] = v
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s declares no constant of type %s", file, typ)
	}
	return out
}
