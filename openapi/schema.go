package openapi

import (
	"fmt"
	"slices"
	"strconv"
)

// Ref refers to the schema name in components.
func Ref(name string) Schema { return Schema{"$ref": "#/components/schemas/" + name} }

// Object is a closed object schema: props, no others, required ones named.
func Object(props Schema, required ...string) Schema {
	s := Schema{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// Type is a schema of one JSON type.
func Type(t string) Schema { return Schema{"type": t} }

// Nullable is a schema of one JSON type or null.
func Nullable(t string) Schema { return Schema{"type": []string{t, "null"}} }

// ArrayOf is an array of items.
func ArrayOf(items Schema) Schema { return Schema{"type": "array", "items": items} }

// Enum is a string schema of the given values.
func Enum[S ~string](values ...S) Schema { return Schema{"type": "string", "enum": values} }

// Described returns a copy of s with a description (s may be shared).
func Described(s Schema, d string) Schema {
	c := make(Schema, len(s)+1)
	for k, v := range s {
		c[k] = v
	}
	c["description"] = d
	return c
}

// TimePattern is httpjson.TimeLayout as a pattern: every time in an answer
// is RFC 3339 in UTC with exactly six fractional digits.
const TimePattern = `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$`

// Schemas every part uses.
var (
	Integer = Schema{"type": "integer", "format": "int64"}
	ID      = Schema{"type": "integer", "format": "int64", "minimum": 1}
	Number  = Type("number")
	String  = Type("string")
	Bool    = Type("boolean")
	Time    = Schema{"type": "string", "format": "date-time", "pattern": TimePattern,
		"description": "RFC 3339 in UTC with six fractional digits, e.g. 2026-01-15T12:00:00.000000Z."}
	TimeNull = Schema{"type": []string{"string", "null"}, "format": "date-time", "pattern": TimePattern,
		"description": "RFC 3339 in UTC with six fractional digits, or null."}
	// AnyJSON is any JSON value.
	AnyJSON = Schema{"description": "Any JSON value."}
)

// ErrorSchema is the one error body of every 4xx and 5xx answer (httpjson):
// components.schemas.Error.
var ErrorSchema = Object(Schema{"error": Object(Schema{
	"code":    Described(String, "Stable, machine-readable: what went wrong."),
	"message": Described(String, "For a person; may change."),
}, "code", "message")}, "error")

// JSONBody is a required JSON request body.
func JSONBody(s Schema) *RequestBody {
	return &RequestBody{Required: true, Content: map[string]MediaType{"application/json": {Schema: s}}}
}

// OptionalJSONBody is a JSON request body that may be left out.
func OptionalJSONBody(s Schema) *RequestBody {
	return &RequestBody{Content: map[string]MediaType{"application/json": {Schema: s}}}
}

// JSONResponse is an answer with a JSON body.
func JSONResponse(desc string, s Schema) Response {
	return Response{Description: desc, Content: map[string]MediaType{"application/json": {Schema: s}}}
}

// ErrorResponse is an error answer with the Error body.
func ErrorResponse(desc string) Response { return JSONResponse(desc, Ref("Error")) }

// Query is a query parameter.
func Query(name, desc string, required bool, s Schema) Parameter {
	return Parameter{Name: name, In: "query", Required: required, Description: desc, Schema: s}
}

// PathParam is a path parameter (always required).
func PathParam(name, desc string, s Schema) Parameter {
	return Parameter{Name: name, In: "path", Required: true, Description: desc, Schema: s}
}

// RefResponses is ok plus a reference to the shared response of each
// status of errs, named by names, where ok has none of its own.
func RefResponses(names map[int]string, ok map[string]Response, errs ...int) map[string]Response {
	out := make(map[string]Response, len(ok)+len(errs))
	for code, r := range ok {
		out[code] = r
	}
	errs = slices.Clone(errs)
	slices.Sort(errs)
	for _, code := range slices.Compact(errs) {
		if _, own := out[strconv.Itoa(code)]; own {
			continue
		}
		name, found := names[code]
		if !found {
			panic(fmt.Sprintf("openapi: no shared response for %d", code))
		}
		out[strconv.Itoa(code)] = Response{Ref: "#/components/responses/" + name}
	}
	return out
}
