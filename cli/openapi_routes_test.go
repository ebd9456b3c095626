package cli

import (
	"slices"
	"strings"
	"testing"

	"switchyard/openapi"
	"switchyard/openapi/openapitest"
)

// undocumentedAdminRoutes are the admin API's routes that the OpenAPI
// document does not describe yet. The list only shrinks: the route walk
// fails when a route on it is documented (take it off) and when a route not
// on it is not (describe it next to its routes, in its package's
// AdminOpenAPI).
var undocumentedAdminRoutes = []string{}

// openapiPath is a route template as OpenAPI writes it: a variable's
// pattern ({id:[0-9]+}) is its parameter's schema, not part of the path.
func openapiPath(tmpl string) string { return pathVar.ReplaceAllString(tmpl, "{$1}") }

// TestOpenAPIDescribesEveryAdminRoute walks the wired server's routes (every
// role, the sandbox) against the document it serves at /openapi.json.
func TestOpenAPIDescribesEveryAdminRoute(t *testing.T) {
	t.Parallel()
	w := newWiredApp(t, walkSecrets, nil)
	doc := openapitest.Served(t, w.app.handler).Doc
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	routes, _ := allRoutes(t, w.app.handler)
	routed := map[string]bool{}
	for _, r := range routes {
		key := r.method + " " + openapiPath(r.template)
		routed[key] = true
		if !strings.HasPrefix(r.template, openapi.AdminPrefix+"/") {
			continue
		}
		listed := slices.Contains(undocumentedAdminRoutes, key)
		switch {
		case documented[key] && listed:
			t.Errorf("%s is documented now: take it off undocumentedAdminRoutes", key)
		case !documented[key] && !listed:
			t.Errorf("%s is not in the OpenAPI document: describe it in its package's AdminOpenAPI, next to its routes", key)
		}
	}
	for _, key := range undocumentedAdminRoutes {
		if !routed[key] {
			t.Errorf("undocumentedAdminRoutes lists %s, which is not routed: take it off", key)
		}
	}
	for key := range documented {
		if !routed[key] {
			t.Errorf("the document describes %s, which is not routed", key)
		}
	}
	t.Logf("admin API: %d routes documented, %d not yet", countPrefix(documented, openapi.AdminPrefix+"/"), len(undocumentedAdminRoutes))
}

func countPrefix(keys map[string]bool, prefix string) int {
	n := 0
	for k := range keys {
		if _, path, _ := strings.Cut(k, " "); strings.HasPrefix(path, prefix) {
			n++
		}
	}
	return n
}
