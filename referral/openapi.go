package referral

import (
	"net/http"

	"switchyard/openapi"
)

// AdminOpenAPI describes the routes of AdminRoutes (tag "referral"),
// relative to the admin API's root. Identity events are published with
// queue's topic routes.
func AdminOpenAPI() openapi.Part {
	type schema = openapi.Schema
	var (
		ref, object, described = openapi.Ref, openapi.Object, openapi.Described
		str                    = openapi.String
		guid                   = described(schema{"type": "string", "format": "uuid"}, "A GUID.")
	)
	p := openapi.AdminPart()
	p.Tags = []openapi.Tag{{Name: "referral", Description: "The referral consumer: links, the identity replica, bonds, " +
		"registrations and who referred a user."}}
	p.Schemas = map[string]schema{
		"Error": openapi.ErrorSchema,
		"NewReferralLink": object(schema{
			"url": described(schema{"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9-]{2,63}$"},
				"The link's slug, what an identity event's ReferrerUrl names; stored lower-cased."),
			"ownerUserId": guid, "tenantId": guid,
			"channel": described(schema{"type": "string", "minLength": 1, "maxLength": 64}, "Where the link is shared, e.g. web."),
		}, "url", "ownerUserId", "tenantId", "channel"),
		"ReferralLink": object(schema{
			"id": str, "url": str, "ownerUserId": guid, "tenantId": str, "channel": str,
			"createdAt": openapi.Time, "deletedAt": openapi.TimeNull,
		}, "id", "url", "ownerUserId", "tenantId", "channel", "createdAt", "deletedAt"),
		"Replica": object(schema{
			"id": guid, "type": described(str, "Investor, Agent, DeveloperManager, …"), "companyId": openapi.Nullable("string"),
			"status": described(str, "Active, Blocked or Archived."),
			"name": object(schema{"firstName": str, "lastName": str, "middleName": openapi.Nullable("string")},
				"firstName", "lastName", "middleName"),
			"phoneNumber": described(str, "As the identity service sent it."), "isNameFilled": openapi.Bool,
			"registeredAt": openapi.TimeNull, "replicaVersion": openapi.Integer, "updatedAt": openapi.Time,
		}, "id", "type", "companyId", "status", "name", "phoneNumber", "isNameFilled", "registeredAt", "replicaVersion", "updatedAt"),
		"Bond": object(schema{
			"id": str, "referredUserId": guid, "referrerUserId": guid, "referralLinkId": str, "tenantId": str,
			"boundAt": openapi.Time, "appliedRule": described(str, "The rule that bonded them, e.g. R1."), "status": str,
			"registrationId": str, "createdAt": openapi.Time,
		}, "id", "referredUserId", "referrerUserId", "referralLinkId", "tenantId", "boundAt", "appliedRule", "status", "registrationId", "createdAt"),
		"Registration": object(schema{
			"id": str, "referredUserId": guid, "registrationType": str, "appliedRule": str, "leadRequested": openapi.Bool,
			"linkUrl": str, "referrerUserId": str, "tenantId": str, "registeredAt": openapi.Time, "bondId": str, "createdAt": openapi.Time,
		}, "id", "referredUserId", "registrationType", "appliedRule", "leadRequested", "linkUrl", "referrerUserId", "tenantId",
			"registeredAt", "bondId", "createdAt"),
	}
	tag, ok := "referral", openapi.OK
	limit := openapi.Query("limit", "At most this many, 1 to 1000.", false, schema{"type": "integer", "minimum": 1, "maximum": 1000})
	user := func(name, desc string) openapi.Parameter { return openapi.Query(name, desc, false, guid) }
	userID := openapi.PathParam("userId", "The user's GUID.", guid)
	bad := []int{http.StatusBadRequest}
	for _, r := range []struct {
		method, path string
		op           openapi.AdminOp
	}{
		{"POST", "/referral/links", openapi.AdminOp{Tag: tag, ID: "createReferralLink", Summary: "Create a referral link",
			Body: openapi.JSONBody(ref("NewReferralLink")),
			OK:   map[string]openapi.Response{"201": openapi.JSONResponse("Created.", object(schema{"id": str}, "id"))},
			Errs: []int{http.StatusConflict}}},
		{"GET", "/referral/links", openapi.AdminOp{Tag: tag, ID: "listReferralLinks", Summary: "Referral links, newest first",
			Params: []openapi.Parameter{
				user("ownerUserId", "Only this owner's links."),
				openapi.Query("includeDeleted", "true: deleted links too.", false, openapi.Bool),
				openapi.Query("q", "A search term.", false, str),
				openapi.Query("before", `The nextBefore of the previous window.`, false, str),
				openapi.Query("after", "The window after this key (newer).", false, str),
				limit,
			},
			OK: ok("A window of links.", object(schema{
				"links":      openapi.ArrayOf(ref("ReferralLink")),
				"nextBefore": described(str, "Present when the window is full: pass it as before for the next one."),
			}, "links")),
			Errs: bad}},
		{"DELETE", "/referral/links/{id}", openapi.AdminOp{Tag: tag, ID: "deleteReferralLink", Summary: "Soft-delete a referral link",
			Params: []openapi.Parameter{openapi.PathParam("id", "The link's id.", str)},
			OK:     map[string]openapi.Response{"204": {Description: "Deleted."}}, Errs: []int{http.StatusNotFound}}},
		{"GET", "/referral/replicas/{userId}", openapi.AdminOp{Tag: tag, ID: "getReplica", Summary: "A user as the identity replica has them",
			Params: []openapi.Parameter{userID}, OK: ok("The replica.", ref("Replica")), Errs: []int{http.StatusBadRequest, http.StatusNotFound}}},
		{"GET", "/referral/bonds", openapi.AdminOp{Tag: tag, ID: "listBonds", Summary: "Referral bonds",
			Params: []openapi.Parameter{user("referredUserId", "Only this referred user's."), user("referrerUserId", "Only this referrer's."), limit},
			OK:     ok("The bonds.", object(schema{"bonds": openapi.ArrayOf(ref("Bond"))}, "bonds")), Errs: bad}},
		{"GET", "/referral/registrations", openapi.AdminOp{Tag: tag, ID: "listRegistrations", Summary: "Registrations the consumer saw",
			Params: []openapi.Parameter{user("referredUserId", "Only this user's."), limit},
			OK:     ok("The registrations.", object(schema{"registrations": openapi.ArrayOf(ref("Registration"))}, "registrations")), Errs: bad}},
		{"GET", "/referral/users/{userId}/referrer", openapi.AdminOp{Tag: tag, ID: "getReferrer", Summary: "Who referred a user (get-my-referrer)",
			Params: []openapi.Parameter{userID},
			OK: ok("The referrer, if any.", object(schema{
				"hasReferrer": openapi.Bool,
				"referrer": schema{"oneOf": []schema{{"type": "null"},
					object(schema{"userId": guid, "name": openapi.Nullable("string")}, "userId", "name")}},
			}, "hasReferrer", "referrer")),
			Errs: bad}},
	} {
		r.op.Add(p, r.method, r.path)
	}
	return p
}
