package backend

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gorilla/mux"
)

func TestOpenAPIMatchesRouter(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t)

	routed := map[string]bool{} // "GET /bot/events/pending"
	err := e.router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		path, err := route.GetPathTemplate()
		if err != nil || !(strings.HasPrefix(path, "/bot/") || strings.HasPrefix(path, "/auth/")) {
			return nil
		}
		methods, err := route.GetMethods()
		if err != nil {
			t.Errorf("route %s has no methods", path)
			return nil
		}
		for _, m := range methods {
			routed[m+" "+path] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(routed) != len(botRoutes) {
		t.Fatalf("router has %d bot routes, the auth test covers %d: %v", len(routed), len(botRoutes), routed)
	}

	// Read the document as served, not the Go value, so the JSON is what is checked.
	var served struct {
		OpenAPI string `json:"openapi"`
		Paths   map[string]map[string]struct {
			Tags      []string                   `json:"tags"`
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
		Components struct {
			Schemas   map[string]json.RawMessage `json:"schemas"`
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"components"`
	}
	status, body := e.request(t, "GET", "/openapi.json", "", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d", status)
	}
	if err := json.Unmarshal(body, &served); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(served.OpenAPI, "3.") {
		t.Fatalf("openapi %q", served.OpenAPI)
	}
	documented := map[string]bool{}
	for path, ops := range served.Paths {
		for method, op := range ops {
			key := strings.ToUpper(method) + " " + path
			documented[key] = true
			t.Run("the document's "+key+" is routed, tagged bot and answers 401", func(t *testing.T) {
				if !routed[key] {
					t.Fatalf("%s is documented but not routed", key)
				}
				if !slices.Equal(op.Tags, []string{"bot"}) {
					t.Fatalf("tags %v", op.Tags)
				}
				if _, ok := op.Responses["401"]; !ok {
					t.Fatal("no 401 response")
				}
			})
		}
	}
	for key := range routed {
		t.Run("the routed "+key+" is documented", func(t *testing.T) {
			if !documented[key] {
				t.Fatalf("%s is routed but not documented", key)
			}
		})
	}
	t.Run("every schema and response reference resolves", func(t *testing.T) {
		for _, ref := range refs(body) {
			var ok bool
			if name, isSchema := strings.CutPrefix(ref, "#/components/schemas/"); isSchema {
				_, ok = served.Components.Schemas[name]
			} else if name, isResponse := strings.CutPrefix(ref, "#/components/responses/"); isResponse {
				_, ok = served.Components.Responses[name]
			}
			if !ok {
				t.Fatalf("dangling reference %s", ref)
			}
		}
	})
}

// refs collects every "$ref" value in a JSON document.
func refs(doc []byte) []string {
	var v any
	_ = json.Unmarshal(doc, &v)
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if s, ok := c.(string); ok && k == "$ref" {
					out = append(out, s)
				}
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(v)
	return out
}
