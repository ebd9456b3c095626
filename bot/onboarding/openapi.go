package onboarding

import (
	"net/http"

	"switchyard/openapi"
)

// AdminOpenAPI describes the routes of AdminRoutes (tag "onboarding"),
// relative to the admin API's root: the funnels and the DMs.
func AdminOpenAPI() openapi.Part {
	type schema = openapi.Schema
	var (
		ref, object, described = openapi.Ref, openapi.Object, openapi.Described
		str, integer           = openapi.String, openapi.Integer
		uidNull                = schema{"type": []string{"integer", "null"}, "format": "int64"}
		telegramID             = schema{"type": "string", "pattern": `^[1-9][0-9]{0,18}$`}
	)
	p := openapi.AdminPart()
	p.Tags = []openapi.Tag{{Name: "onboarding", Description: "The onboarding bot for operators and tests: the users' funnels and the bot's DMs."}}
	p.Schemas = map[string]schema{
		"Error": openapi.ErrorSchema,
		"Funnel": object(schema{
			"telegramId": described(telegramID, "The user's Telegram id, as decimal text."),
			"uid":        described(uidNull, "The backend account, once known."),
			"stage":      described(schema{"type": "integer", "minimum": 0, "maximum": int(StageNftActivated)}, "1 (started) to 9 (NFT activated)."),
			"stageName":  str,
			"leaderUid":  uidNull, "leaderCode": str, "leaderName": str,
			"registeredLeaderUid": described(uidNull, "The leader the registered event named."),
			"leftLeaderAt":        described(openapi.TimeNull, "When the user registered under another leader than the one they arrived with."),
			"bindState":           openapi.Enum(BindNone, BindAwaiting, BindPrompted, BindBound, BindDeclined),
			"createdAt":           openapi.Time, "updatedAt": openapi.Time,
		}, "telegramId", "uid", "stage", "stageName", "leaderUid", "registeredLeaderUid", "leftLeaderAt", "bindState", "createdAt", "updatedAt"),
		"FunnelChange": object(schema{
			"id": integer, "cause": str, "change": str, "oldValue": openapi.Nullable("string"), "newValue": openapi.Nullable("string"),
			"at": openapi.Time,
		}, "id", "cause", "change", "oldValue", "newValue", "at"),
		"DM": object(schema{
			"key": described(str, "<cause>:<message key>."), "cause": described(str, "The event or update that asked for it."),
			"method": described(str, "The Bot API method, e.g. sendMessage."), "chatId": telegramID, "text": str,
			"status":   openapi.Enum(DMPending, DMRetrying, DMSending, DMFailed, DMSent, DMNotified),
			"attempts": integer, "lastError": str,
			"messageId":   described(str, "The queue message's id while it waits or is dead (redrive it with that)."),
			"at":          openapi.Time,
			"traceparent": str,
		}, "key", "cause", "method", "chatId", "text", "status", "attempts", "at"),
	}
	tag, ok := "onboarding", openapi.OK
	limit := openapi.Query("limit", "At most this many (capped at 500).", false, schema{"type": "integer", "minimum": 1})
	for _, r := range []struct {
		method, path string
		op           openapi.AdminOp
	}{
		{"GET", "/bot/funnel", openapi.AdminOp{Tag: tag, ID: "listFunnels", Summary: "The onboarding funnels, filtered",
			Params: []openapi.Parameter{
				openapi.Query("stage", "Only funnels at this stage, 1 to 9.", false, schema{"type": "integer", "minimum": 1, "maximum": int(StageNftActivated)}),
				openapi.Query("leftLeader", "true: only users who registered under another leader.", false, openapi.Bool),
				openapi.Query("q", "A search: a Telegram id, uid or leader code.", false, str),
				openapi.Query("before", "The page before this cursor.", false, str),
				openapi.Query("after", "The page after this cursor.", false, str),
				limit,
			},
			OK:   ok("The funnels.", object(schema{"funnels": openapi.ArrayOf(ref("Funnel"))}, "funnels")),
			Errs: []int{http.StatusBadRequest}}},
		{"GET", "/bot/funnel/{telegramId}", openapi.AdminOp{Tag: tag, ID: "getFunnel", Summary: "One user's funnel with its history",
			Params: []openapi.Parameter{openapi.PathParam("telegramId", "The user's Telegram id.", telegramID)},
			OK: ok("The funnel.", object(schema{"funnel": ref("Funnel"), "history": openapi.ArrayOf(ref("FunnelChange"))},
				"funnel", "history")),
			Errs: []int{http.StatusBadRequest, http.StatusNotFound}}},
		{"GET", "/bot/dms", openapi.AdminOp{Tag: tag, ID: "listDMs", Summary: "The bot's DMs, newest first: queued, failed and delivered",
			Params: []openapi.Parameter{
				openapi.Query("chatId", "Only the DMs to this chat.", false, telegramID),
				openapi.Query("status", "Only DMs in this status.", false, openapi.Enum(DMPending, DMRetrying, DMSending, DMFailed, DMSent, DMNotified)),
				limit,
			},
			OK:   ok("The DMs.", object(schema{"dms": openapi.ArrayOf(ref("DM"))}, "dms")),
			Errs: []int{http.StatusBadRequest}}},
		{"POST", "/bot/dms/{id}/redrive", openapi.AdminOp{Tag: tag, ID: "redriveDM", Summary: "Send a failed DM (a dead letter of the DM queue) again",
			Params: []openapi.Parameter{openapi.PathParam("id", "The DM's messageId.", str)},
			OK:     ok("Redriven.", object(schema{"redriven": integer}, "redriven")),
			Errs:   []int{http.StatusNotFound}}},
	} {
		r.op.Add(p, r.method, r.path)
	}
	return p
}
