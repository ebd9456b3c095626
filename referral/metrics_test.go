package referral

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// constantsOf returns the values of the string constants of type typ
// declared in the package's file, so a test can tell when a new one is not
// in the list a metric is declared from.
func constantsOf(t *testing.T, file, typ string) map[string]string {
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
				if !ok {
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

// TestEveryOutcomeIsCountedFromTheStart: each Outcome is either one of
// attachOutcomes, whose series exist at 0 from the consumer's start, or one
// of the few that are not attach outcomes — so a new outcome cannot be
// added without deciding which.
func TestEveryOutcomeIsCountedFromTheStart(t *testing.T) {
	notAttach := []Outcome{OutcomeOwnerMissing, OutcomeBlocked, OutcomeStale, OutcomeNoReplica}
	for name, v := range constantsOf(t, "rules.go", "Outcome") {
		attach, other := slices.Contains(attachOutcomes, Outcome(v)), slices.Contains(notAttach, Outcome(v))
		if attach == other {
			t.Errorf("%s (%q): in attachOutcomes %v, among the others %v; want exactly one", name, v, attach, other)
		}
	}

	t.Run("declareMetrics makes a series for each attach outcome and each dead-letter reason", func(t *testing.T) {
		declareMetrics()
		families, err := prometheus.DefaultGatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		have := map[string][]string{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					have[f.GetName()+"/"+l.GetName()] = append(have[f.GetName()+"/"+l.GetName()], l.GetValue())
				}
			}
		}
		want := map[string][]string{
			"switchyard_referral_attach_outcomes_total/outcome":  {"R1", "G1", "G2", "G3", "G4", "G5", "first-seen-skip", "replica-only", "invalid-slug", "race-lost"},
			"switchyard_referral_dead_lettered_total/reason":     {"bad-payload", "owner-replica-missing", "transient"},
			"switchyard_referral_retries_total/reason":           {"owner-replica-missing", "transient"},
			"switchyard_referral_consumed_messages_total/result": {"ok", "duplicate", "ignored", "retry", "dead"},
		}
		for key, values := range want {
			for _, v := range values {
				if !slices.Contains(have[key], v) {
					t.Errorf("%s has no series %q", key, v)
				}
			}
		}
	})
}
