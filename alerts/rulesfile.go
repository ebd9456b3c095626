package alerts

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// RulesFilePath is the committed rules file, from the repository's root.
const RulesFilePath = "docs/alerts/switchyard-rules.yml"

// RulesFile renders Rules as a Prometheus rules file, one group named
// switchyard. Each runbook_url is runbookBase followed by the runbook's
// file name: RunbookDir for the committed file (a path in this repository),
// or the web address of that folder in your copy of the repository (see
// gen.go).
func RulesFile(runbookBase string) []byte {
	var b strings.Builder
	b.WriteString(`# Switchyard's Prometheus alerting rules. Generated from alerts/alerts.go by
# "go generate ./alerts": change the rules there, not here (a test fails while
# this file differs). docs/alerts/README.md says how to load them, and
# switchyard-rules_test.yml is their unit test (promtool test rules).
groups:
  - name: switchyard
    rules:
`)
	for _, r := range Rules() {
		b.WriteString("      - alert: " + string(r.Alert) + "\n")
		b.WriteString("        expr: |-\n")
		for l := range strings.SplitSeq(r.Expr, "\n") {
			b.WriteString("          " + l + "\n")
		}
		if r.For > 0 {
			b.WriteString("        for: " + duration(r.For) + "\n")
		}
		b.WriteString("        labels:\n")
		b.WriteString("          severity: " + string(r.Severity) + "\n")
		for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
			b.WriteString("          " + k + ": " + quote(r.Labels[k]) + "\n")
		}
		b.WriteString("        annotations:\n")
		b.WriteString("          summary: " + quote(r.Summary) + "\n")
		b.WriteString("          description: " + quote(r.Description) + "\n")
		b.WriteString("          runbook_url: " + quote(runbookBase+r.Runbook) + "\n")
	}
	return []byte(b.String())
}

// quote is a YAML double-quoted scalar. Go's escapes are a subset of YAML's
// for the text the rules hold (printable UTF-8, \n, \", \\).
func quote(s string) string { return strconv.Quote(s) }
