//go:build ignore

// gen writes the Prometheus rules file from alerts.Rules: `go generate
// ./alerts` writes the committed docs/alerts/switchyard-rules.yml. To load
// the rules with runbook links that open in a browser, write your own copy
// with the web address of docs/runbooks/ in your copy of the repository:
//
//	go run ./alerts/gen.go -runbook-base https://git.example.com/ops/switchyard/-/blob/main/docs/runbooks/ -o switchyard-rules.yml
package main

import (
	"flag"
	"log"
	"os"
	"path/filepath"

	"switchyard/alerts"
)

func main() {
	out := flag.String("o", filepath.Join("..", alerts.RulesFilePath), "the file to write")
	base := flag.String("runbook-base", alerts.RunbookDir, "what each runbook_url starts with: the runbooks' folder")
	flag.Parse()
	if err := os.WriteFile(*out, alerts.RulesFile(*base), 0o644); err != nil {
		log.Fatal(err)
	}
}
