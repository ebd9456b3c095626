package openapi

import (
	"net/http"
	"strings"
)

// AdminPrefix is where the admin API is mounted: a part of admin routes
// describes its paths relative to it.
const AdminPrefix = "/admin/api"

// AdminSecurity is the admin API's guard (web): the admin token as a Bearer
// token, or a console session.
var AdminSecurity = []map[string][]string{{"adminToken": {}}, {"consoleSession": {}}}

// adminSecuritySchemes are AdminSecurity's schemes.
var adminSecuritySchemes = map[string]Schema{
	"adminToken": {"type": "http", "scheme": "bearer",
		"description": "SWITCHYARD_ADMIN_TOKEN, compared in constant time. Wrong tokens from one address are " +
			"throttled together with the process's other secrets (429)."},
	"consoleSession": {"type": "apiKey", "in": "cookie", "name": "switchyard_session",
		"description": "The console's session cookie, set by POST /admin/login; what the console's own scripts send."},
}

// adminResponses are the admin API's shared error answers, by status; each
// has the Error body.
var adminResponses = map[int]struct {
	name string
	resp Response
}{
	http.StatusBadRequest: {"AdminBadRequest", ErrorResponse("Bad input (code `bad_request`, or one the operation names): " +
		"a malformed parameter, malformed JSON, an unknown field, a value out of range. Nothing changed.")},
	http.StatusUnauthorized: {"AdminUnauthorized", ErrorResponse("Neither the admin token nor a console session " +
		"(code `unauthorized`); the answer never says what was wrong.")},
	http.StatusForbidden: {"AdminCrossOrigin", ErrorResponse("A state change from another origin (code `cross_origin`): " +
		"Sec-Fetch-Site or Origin names another site. Nothing changed.")},
	http.StatusNotFound: {"AdminNotFound", ErrorResponse("What the path (or the body) names does not exist " +
		"(code `not_found`, or one the operation names).")},
	http.StatusMethodNotAllowed: {"AdminMethodNotAllowed", Response{
		Description: "The path was asked with a method it does not take (code `method_not_allowed`).",
		Headers: map[string]Header{"Allow": {Description: "The methods the path takes, e.g. GET, POST.", Required: true,
			Schema: Schema{"type": "string", "pattern": `^[A-Z]+(, [A-Z]+)*$`}}},
		Content: map[string]MediaType{"application/json": {Schema: Ref("Error")}},
	}},
	http.StatusRequestTimeout: {"AdminRequestTimeout", ErrorResponse("The request body did not arrive within the server's " +
		"read timeout (code `request_timeout`). Nothing changed.")},
	http.StatusConflict: {"AdminConflict", ErrorResponse("Conflicts with the current state (code `conflict`, or one the " +
		"operation names). Nothing changed.")},
	http.StatusRequestEntityTooLarge: {"AdminPayloadTooLarge", ErrorResponse("The request body is larger than the " +
		"server's cap (SWITCHYARD_BODY_LIMIT; code `body_too_large`). Nothing changed.")},
	http.StatusUnsupportedMediaType: {"AdminUnsupportedMediaType", ErrorResponse("The body is not declared as JSON " +
		"(code `unsupported_media_type`): Content-Type must be application/json. Nothing changed.")},
	http.StatusTooManyRequests: {"AdminTooManyRequests", Response{
		Description: "Too many wrong tokens from this address (code `too_many_attempts`): no token is checked until " +
			"Retry-After has passed.",
		Headers: map[string]Header{"Retry-After": {Description: "Seconds to wait before the next attempt.", Required: true,
			Schema: Schema{"type": "integer", "minimum": 1}}},
		Content: map[string]MediaType{"application/json": {Schema: Ref("Error")}},
	}},
	http.StatusInternalServerError: {"AdminInternalError", ErrorResponse("The server failed (code `internal`), e.g. the " +
		"database could not be written; the request may be sent again.")},
	http.StatusServiceUnavailable: {"AdminUnavailable", ErrorResponse("Not possible now (code `unavailable`); try again later.")},
}

var adminNames = func() map[int]string {
	m := map[int]string{}
	for code, r := range adminResponses {
		m[code] = r.name
	}
	return m
}()

// AdminPart is what every part of admin routes refers to: the Error schema,
// the security schemes and the shared error answers. A part of admin routes
// starts from it (Admin).
func AdminPart() Part {
	p := Part{
		Paths:           map[string]PathItem{},
		Schemas:         map[string]Schema{"Error": ErrorSchema},
		Responses:       map[string]Response{},
		SecuritySchemes: adminSecuritySchemes,
	}
	for _, r := range adminResponses {
		p.Responses[r.name] = r.resp
	}
	return p
}

// AdminOp is an operation of the admin API in Part.Paths: tagged tag, under
// AdminSecurity, with ok and the shared answers of errs plus those every
// admin operation can give — the guard's (401, 429), the router's (405), the
// body cap's (413) and a failure's (500); a state change (any method but
// GET) can be refused as cross-origin (403) too, and one with a JSON body
// as malformed (400), not declared JSON (415) or cut short (408).
type AdminOp struct {
	Tag, ID, Summary, Description string
	Params                        []Parameter
	Body                          *RequestBody
	OK                            map[string]Response
	Errs                          []int
}

// Add adds op as method path ("GET", "/queues") to p.
func (op AdminOp) Add(p Part, method, path string) {
	errs := append([]int{http.StatusUnauthorized, http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge,
		http.StatusTooManyRequests, http.StatusInternalServerError}, op.Errs...)
	if method != http.MethodGet {
		errs = append(errs, http.StatusForbidden)
	}
	if op.Body != nil {
		errs = append(errs, http.StatusBadRequest, http.StatusUnsupportedMediaType, http.StatusRequestTimeout)
	}
	item, ok := p.Paths[path]
	if !ok {
		item = PathItem{}
		p.Paths[path] = item
	}
	item[strings.ToLower(method)] = &Operation{
		Tags: []string{op.Tag}, OperationID: op.ID, Summary: op.Summary, Description: op.Description,
		Security: AdminSecurity, Parameters: op.Params, RequestBody: op.Body,
		Responses: RefResponses(adminNames, op.OK, errs...),
	}
}

// OK is a 200 answer with a JSON body.
func OK(desc string, s Schema) map[string]Response {
	return map[string]Response{"200": JSONResponse(desc, s)}
}
