package clock

import (
	"net/http"

	"switchyard/openapi"
)

// AdminOpenAPI describes the routes of AdminRoutes (tag "clock"), relative
// to the admin API's root. The document has them only where the routes
// exist: on an instance with a manual clock.
func AdminOpenAPI() openapi.Part {
	p := openapi.AdminPart()
	p.Tags = []openapi.Tag{{Name: "clock", Description: "The movable clock of an instance started with --clock manual " +
		"(tests only, sandbox only): it stands still until a test moves it forward."}}
	p.Schemas = map[string]openapi.Schema{
		"Error": openapi.ErrorSchema,
		"ClockTime": openapi.Object(openapi.Schema{
			"now": openapi.Described(openapi.Time, "The store's time."),
			"advancedBy": openapi.Described(openapi.String,
				`The move an advance made, as Go writes a duration ("10m0s"); absent on a read.`),
		}, "now"),
		"ClockAdvance": openapi.Object(openapi.Schema{
			"by": openapi.Described(openapi.String, `A positive Go duration: "90s", "10m", "24h", "1h30m".`),
		}, "by"),
	}
	openapi.AdminOp{Tag: "clock", ID: "getClock", Summary: "The store's time",
		OK: openapi.OK("The time.", openapi.Ref("ClockTime"))}.Add(p, http.MethodGet, "/clock")
	openapi.AdminOp{Tag: "clock", ID: "advanceClock", Summary: "Move the clock forward",
		Description: "Moves the store's clock forward by a positive duration and wakes every worker, long poll and " +
			"schedule, so what fell due runs now; live leases move with it. The clock never goes back.",
		Body: openapi.JSONBody(openapi.Ref("ClockAdvance")),
		OK:   openapi.OK("The time after the move.", openapi.Ref("ClockTime")),
	}.Add(p, http.MethodPost, "/clock/advance")
	return p
}
