package cli

import "switchyard/openapi"

// apiInfo is the info of the document served at GET /openapi.json. The
// repository declares no license, so the API is documented as proprietary;
// change it with the repository's.
var apiInfo = openapi.Info{
	Title:   "Switchyard HTTP API",
	Version: "1",
	Description: "Every JSON route this process serves: the bot's service API (tag bot: /bot/* and /auth/*, " +
		"behind BOT_TO_BACKEND_SECRET) and the admin API under /admin/api (behind the admin token or a console " +
		"session; state changes refuse other origins). Only the routes of the subsystems this process wires are " +
		"described. Every body is JSON (Content-Type: application/json), every error {\"error\":{\"code\",\"message\"}}, " +
		"every time RFC 3339 in UTC with six fractional digits.",
	License: openapi.License{Name: "Proprietary", Identifier: "LicenseRef-Proprietary"},
}

// apiDocument is the document of the parts' routes: public ones at the
// root, admin ones under the admin API's prefix.
func apiDocument(public, admin []openapi.Part) *openapi.Document {
	d := openapi.New(apiInfo)
	for _, p := range public {
		d.Add("", p)
	}
	for _, p := range admin {
		d.Add(openapi.AdminPrefix, p)
	}
	return d
}
