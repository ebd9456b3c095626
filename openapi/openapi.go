// Package openapi builds the OpenAPI 3.1 document Switchyard serves at GET
// /openapi.json: the object types of the specification that the document
// uses, the schema helpers every package's description shares, and Part —
// what one package says about the routes it mounts. Each package that mounts
// routes describes them in a function next to them (bot/backend's OpenAPI,
// queue's AdminOpenAPI, …); the wiring adds the parts of the routes it
// mounts to one Document, under the prefix it mounts them at, so the
// document describes what the process serves.
//
// It is a leaf: it imports nothing of Switchyard's.
package openapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
)

// Document is an OpenAPI 3.1 document.
type Document struct {
	OpenAPI    string                `json:"openapi"`
	Info       Info                  `json:"info"`
	Servers    []Server              `json:"servers"`
	Tags       []Tag                 `json:"tags"`
	Security   []map[string][]string `json:"security,omitempty"`
	Paths      map[string]PathItem   `json:"paths"`
	Components Components            `json:"components"`
}

// PathItem is a path item object: the operations of one path, by lower-case
// method.
type PathItem = map[string]*Operation

// Info is the document's info object.
type Info struct {
	Title       string  `json:"title"`
	Version     string  `json:"version"`
	Description string  `json:"description"`
	License     License `json:"license"`
}

// License is the info object's license (an SPDX identifier).
type License struct {
	Name       string `json:"name"`
	Identifier string `json:"identifier"`
}

// Server is a server object.
type Server struct {
	URL         string `json:"url"`
	Description string `json:"description"`
}

// Tag is a tag object.
type Tag struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// Operation is an operation object.
type Operation struct {
	Tags        []string              `json:"tags"`
	OperationID string                `json:"operationId"`
	Summary     string                `json:"summary"`
	Description string                `json:"description,omitempty"`
	Security    []map[string][]string `json:"security,omitempty"`
	Parameters  []Parameter           `json:"parameters,omitempty"`
	RequestBody *RequestBody          `json:"requestBody,omitempty"`
	Responses   map[string]Response   `json:"responses"`
}

// Parameter is a parameter object.
type Parameter struct {
	Name        string `json:"name"`
	In          string `json:"in"`
	Required    bool   `json:"required"`
	Description string `json:"description"`
	Schema      Schema `json:"schema"`
}

// RequestBody is a request body object.
type RequestBody struct {
	Required bool                 `json:"required"`
	Content  map[string]MediaType `json:"content"`
}

// Response is a response object, or (Ref set, nothing else) a reference to
// one of the shared responses in components.
type Response struct {
	Ref         string               `json:"$ref,omitempty"`
	Description string               `json:"description,omitempty"`
	Headers     map[string]Header    `json:"headers,omitempty"`
	Content     map[string]MediaType `json:"content,omitempty"`
}

// Header is a header object.
type Header struct {
	Description string `json:"description"`
	Required    bool   `json:"required"`
	Schema      Schema `json:"schema"`
}

// MediaType is a media type object.
type MediaType struct {
	Schema Schema `json:"schema"`
}

// Components holds the schemas, the shared responses and the security
// schemes.
type Components struct {
	Schemas         map[string]Schema   `json:"schemas"`
	Responses       map[string]Response `json:"responses"`
	SecuritySchemes map[string]Schema   `json:"securitySchemes"`
}

// Schema is a JSON Schema (2020-12, as OpenAPI 3.1 has it), or a security
// scheme object.
type Schema = map[string]any

// Part is what one package says about the routes it mounts: its paths
// (relative to where it is mounted), the tags they use, and the components
// they refer to. A component two parts both define must be the same.
type Part struct {
	Tags            []Tag
	Paths           map[string]PathItem
	Schemas         map[string]Schema
	Responses       map[string]Response
	SecuritySchemes map[string]Schema
}

// New is a document with info and no paths yet.
func New(info Info) *Document {
	return &Document{
		OpenAPI: "3.1.0",
		Info:    info,
		Servers: []Server{{URL: "/", Description: "The Switchyard process that serves this document (SWITCHYARD_ADDR)."}},
		Paths:   map[string]PathItem{},
		Components: Components{
			Schemas: map[string]Schema{}, Responses: map[string]Response{}, SecuritySchemes: map[string]Schema{},
		},
	}
}

// Add adds p's paths under prefix ("" for the root, "/admin/api" for the
// admin API) and its components. A path or operation described twice, or a
// component defined twice differently, is a wiring mistake: Add panics.
func (d *Document) Add(prefix string, p Part) *Document {
	for path, item := range p.Paths {
		full := prefix + path
		have, ok := d.Paths[full]
		if !ok {
			have = PathItem{}
			d.Paths[full] = have
		}
		for method, op := range item {
			if _, dup := have[method]; dup {
				panic(fmt.Sprintf("openapi: %s %s described twice", method, full))
			}
			have[method] = op
		}
	}
	for _, t := range p.Tags {
		if i := slices.IndexFunc(d.Tags, func(o Tag) bool { return o.Name == t.Name }); i >= 0 {
			if d.Tags[i] != t {
				panic(fmt.Sprintf("openapi: tag %q described twice, differently", t.Name))
			}
			continue
		}
		d.Tags = append(d.Tags, t)
	}
	merge("schema", d.Components.Schemas, p.Schemas)
	merge("response", d.Components.Responses, p.Responses)
	merge("security scheme", d.Components.SecuritySchemes, p.SecuritySchemes)
	return d
}

func merge[V any](what string, into, from map[string]V) {
	for name, v := range from {
		if have, ok := into[name]; ok && !reflect.DeepEqual(have, v) {
			panic(fmt.Sprintf("openapi: %s %q defined twice, differently", what, name))
		}
		into[name] = v
	}
}

// MarshalJSON writes the document without the shared responses no
// operation refers to (a part brings the set its routes may use; an unused
// component is noise to a reader, and a linter says so).
func (d Document) MarshalJSON() ([]byte, error) {
	type plain Document
	paths, err := json.Marshal(d.Paths)
	if err != nil {
		return nil, err
	}
	used := maps.Clone(d.Components.Responses)
	for name := range used {
		if !strings.Contains(string(paths), `"#/components/responses/`+name+`"`) {
			delete(used, name)
		}
	}
	d.Components.Responses = used
	return json.Marshal(plain(d))
}

// Operations are the document's operations by "METHOD /path" (the method
// in upper case).
func (d *Document) Operations() map[string]*Operation {
	ops := map[string]*Operation{}
	for path, item := range d.Paths {
		for method, op := range item {
			ops[strings.ToUpper(method)+" "+path] = op
		}
	}
	return ops
}

// Handler serves d as JSON, marshalled once: GET /openapi.json.
func Handler(d *Document) http.Handler {
	body, err := json.Marshal(d)
	if err != nil {
		panic(fmt.Sprintf("openapi: the document does not marshal: %v", err))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = w.Write(append(body, '\n'))
	})
}
