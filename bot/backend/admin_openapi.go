package backend

import (
	"net/http"

	"switchyard/bot/contract"
	"switchyard/openapi"
)

// AdminOpenAPI describes the routes of AdminRoutes (tag "bot admin"),
// relative to the admin API's root: the backend actions that emit, the raw
// emit, and the outbox's events.
func AdminOpenAPI() openapi.Part {
	shared := OpenAPI().Schemas
	tgNull := described(schema{"type": []string{"string", "null"}, "pattern": telegramIDPattern}, "Telegram id as decimal text, or null.")
	uidNull := schema{"type": []string{"integer", "null"}, "format": "int64"}
	p := openapi.AdminPart()
	p.Tags = []openapi.Tag{{Name: "bot admin", Description: "The bot backend for operators and tests: users and the " +
		"actions that emit outbox events, a raw emit, and the outbox's events with their attempts and redrive."}}
	p.Schemas = map[string]schema{
		"Error":        openapi.ErrorSchema,
		"TelegramId":   shared["TelegramId"],
		"EventType":    shared["EventType"],
		"Notification": shared["Notification"],
		"BotUser": object(schema{
			"uid": tID, "link": tString, "name": tString, "telegramId": tgNull, "previewTelegramId": tgNull,
			"leaderUid": uidNull, "addr": nullable("string"), "lp1": tBool, "lp2": tBool, "timeActive": tTimeNull,
			"registrationConfirmed": tBool, "createdAt": tTime,
		}, "uid", "link", "name", "telegramId", "previewTelegramId", "leaderUid", "addr", "lp1", "lp2", "timeActive",
			"registrationConfirmed", "createdAt"),
		"NewBotUser": object(schema{
			"link":       schema{"type": "string", "pattern": `^\s*[A-Za-z0-9_-]{1,64}\s*$`},
			"name":       described(schema{"type": "string", "minLength": 1}, "1 to 200 characters, not only spaces."),
			"telegramId": described(ref("TelegramId"), "Optional: bind this Telegram id."),
			"leaderUid":  described(schema{"type": "integer", "format": "int64", "minimum": 0}, "Optional: the user's leader."),
		}, "link", "name"),
		"ActionResult": object(schema{
			"user":     ref("BotUser"),
			"eventIds": described(schema{"type": "array", "items": tID}, "The outbox events the action emitted (none when it changed nothing)."),
		}, "user", "eventIds"),
		"EventState":  openapi.Enum(StatePending, StateRetrying, StateProcessed, StateDead),
		"EventRecord": object(eventRecordProps(tgNull, uidNull), eventRecordRequired...),
		"EventDetail": object(func() schema {
			props := eventRecordProps(tgNull, uidNull)
			props["attemptHistory"] = openapi.ArrayOf(object(schema{
				"attempt": described(tInteger, "The delivery's number (1 for the first, 1 again after a redrive); 0 for a redrive."),
				"outcome": tString, "error": tString, "at": tTime, "instance": tString,
			}, "attempt", "outcome", "at", "instance"))
			return props
		}(), append(eventRecordRequired, "attemptHistory")...),
		"EmitRequest": described(object(schema{
			"eventType":  ref("EventType"),
			"telegramId": ref("TelegramId"),
			"magnetUid":  schema{"type": "integer", "format": "int64", "minimum": 0},
			"payload":    openapi.AnyJSON,
		}, "eventType"), "telegramId or magnetUid names who the event is for."),
	}
	uid := openapi.PathParam("uid", "The user's uid.", schema{"type": "integer", "format": "int64", "minimum": 1})
	eventID := openapi.PathParam("id", "The event's id.", schema{"type": "integer", "format": "int64", "minimum": 1})
	ok, tag := openapi.OK, "bot admin"
	nf := []int{http.StatusNotFound, http.StatusBadRequest}
	action := func(id, summary string, body schema, errs ...int) openapi.AdminOp {
		return openapi.AdminOp{Tag: tag, ID: id, Summary: summary, Params: []openapi.Parameter{uid},
			Body: openapi.JSONBody(body), OK: ok("The user as the action left it, and the events it emitted.", ref("ActionResult")),
			Errs: append([]int{http.StatusNotFound}, errs...)}
	}
	for _, r := range []struct {
		method, path string
		op           openapi.AdminOp
	}{
		{"POST", "/users", openapi.AdminOp{Tag: tag, ID: "createBotUser", Summary: "Create a user (the backend's account)",
			Body: openapi.JSONBody(ref("NewBotUser")),
			OK:   map[string]openapi.Response{"201": openapi.JSONResponse("Created.", ref("BotUser"))},
			Errs: []int{http.StatusNotFound, http.StatusConflict}}},
		{"GET", "/users/{uid}", openapi.AdminOp{Tag: tag, ID: "getBotUser", Summary: "One user",
			Params: []openapi.Parameter{uid}, OK: ok("The user.", ref("BotUser")), Errs: nf}},
		{"GET", "/users/{uid}/notifications", openapi.AdminOp{Tag: tag, ID: "listBotUserNotifications",
			Summary: "A user's web-cabinet notifications", Params: []openapi.Parameter{uid},
			OK:   ok("The notifications.", object(schema{"notifications": openapi.ArrayOf(ref("Notification"))}, "notifications")),
			Errs: nf}},
		{"POST", "/users/{uid}/wallet", action("connectBotUserWallet", "Connect a wallet (emits wallet_connected)",
			object(schema{"addr": schema{"type": "string", "minLength": 1}}, "addr"))},
		{"POST", "/users/{uid}/register", action("registerBotUser", "Confirm the registration, under a leader or none",
			object(schema{"leaderUid": schema{"type": []string{"integer", "null"}, "format": "int64", "minimum": 1}}), http.StatusConflict)},
		{"POST", "/users/{uid}/nft", action("activateBotUserNFT", "Activate an NFT level (emits status_nft_activated)",
			object(schema{"level": openapi.Enum(contract.NftLP1, contract.NftLP2)}, "level"))},
		{"POST", "/bot/events", openapi.AdminOp{Tag: tag, ID: "emitBotEvent", Summary: "Write an outbox event as it is given (raw emit)",
			Body: openapi.JSONBody(ref("EmitRequest")),
			OK:   map[string]openapi.Response{"201": openapi.JSONResponse("Emitted.", object(schema{"id": tID}, "id"))},
			Errs: []int{http.StatusNotFound}}},
		{"GET", "/bot/events", openapi.AdminOp{Tag: tag, ID: "listBotEvents", Summary: "The outbox's events, newest first, filtered",
			Params: []openapi.Parameter{
				openapi.Query("state", "pending, retrying, processed or dead.", false, ref("EventState")),
				openapi.Query("type", "An event type.", false, ref("EventType")),
				openapi.Query("magnetUid", "The events of this uid.", false, schema{"type": "integer", "format": "int64", "minimum": 1}),
				openapi.Query("telegramId", "The events of this Telegram id.", false, ref("TelegramId")),
				openapi.Query("limit", "At most this many (capped at 500).", false, schema{"type": "integer", "minimum": 1}),
				openapi.Query("beforeId", "Only ids below this one (the next page).", false, schema{"type": "integer", "format": "int64", "minimum": 1}),
				openapi.Query("afterId", "Only ids above this one.", false, schema{"type": "integer", "format": "int64", "minimum": 1}),
				openapi.Query("q", "A search in the events' payload and last error.", false, tString),
			},
			OK:   ok("The events.", object(schema{"events": openapi.ArrayOf(ref("EventRecord"))}, "events")),
			Errs: []int{http.StatusBadRequest}}},
		{"GET", "/bot/events/{id}", openapi.AdminOp{Tag: tag, ID: "getBotEvent", Summary: "One event with its attempt history",
			Params: []openapi.Parameter{eventID}, OK: ok("The event.", ref("EventDetail")), Errs: nf}},
		{"POST", "/bot/events/{id}/redrive", openapi.AdminOp{Tag: tag, ID: "redriveBotEvent",
			Summary: "Make a dead or retrying event due again with a fresh count of attempts",
			Params:  []openapi.Parameter{eventID}, OK: ok("The event as the redrive left it.", ref("EventRecord")),
			Errs: append(nf, http.StatusConflict)}},
	} {
		r.op.Add(p, r.method, r.path)
	}
	return p
}

var eventRecordRequired = []string{"id", "eventType", "telegramId", "magnetUid", "payload", "createdAt", "processedAt", "attempts",
	"claimedAt", "lockedUntil", "lastError", "lastAttemptAt", "nextRetryAt", "deadLettered", "deadLetteredAt", "state"}

func eventRecordProps(tgNull, uidNull schema) schema {
	return schema{
		"id": tID, "eventType": ref("EventType"), "telegramId": tgNull, "magnetUid": uidNull,
		"payload": described(openapi.AnyJSON, "The event's payload, or null."), "createdAt": tTime, "processedAt": tTimeNull,
		"attempts": tInteger, "claimedAt": tTimeNull, "lockedUntil": tTimeNull, "lastError": nullable("string"),
		"lastAttemptAt": tTimeNull, "nextRetryAt": tTimeNull, "deadLettered": tBool, "deadLetteredAt": tTimeNull,
		"state": ref("EventState"),
		"traceparent": described(schema{"type": "string", "pattern": traceparentPattern},
			"The emit's span (bot.outbox.emit), when it was traced."),
	}
}
