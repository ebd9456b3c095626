package backend

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"

	"switchyard/bot/contract"
	"switchyard/openapi"
)

// The bot's descriptions use openapi's builders under short local names.
type schema = openapi.Schema

var (
	ref       = openapi.Ref
	object    = openapi.Object
	nullable  = openapi.Nullable
	described = openapi.Described
	jsonBody  = openapi.JSONBody
	tInteger  = openapi.Integer
	tID       = openapi.ID
	tString   = openapi.String
	tBool     = openapi.Bool
	tTime     = openapi.Time
	tTimeNull = openapi.TimeNull
)

func jsonResponse(desc string, s schema) openapi.Response { return openapi.JSONResponse(desc, s) }

func errResponse(desc string) openapi.Response { return openapi.ErrorResponse(desc) }

// telegramIDPattern is what ParseTelegramID accepts, within int64's range.
const telegramIDPattern = `^[1-9][0-9]{0,18}$`

// traceparentPattern is a W3C traceparent of version 00, as the backend
// writes one (telemetry.Traceparent): trace id, parent span id, flags.
const traceparentPattern = `^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`

var (
	// tTelegramIn is a Telegram id in a request body: the canonical decimal
	// text or a JSON integer.
	tTelegramIn = described(schema{"anyOf": []schema{
		ref("TelegramId"),
		{"type": "integer", "format": "int64", "minimum": 1, "maximum": int64(math.MaxInt64)},
	}}, "A Telegram id as decimal text (preferred) or as a JSON integer.")
)

// sharedResponses are the error answers in components.responses, by
// status: each names its codes, and every one has the one Error body.
var sharedResponses = map[int]struct {
	name string
	resp openapi.Response
}{
	http.StatusBadRequest: {"BadRequest", errResponse("Bad input (code `bad_request`): a malformed or missing parameter, " +
		"malformed JSON, an unknown field, a value out of range. Nothing changed.")},
	http.StatusUnauthorized: {"Unauthorized", openapi.Response{
		Description: "Missing, malformed or wrong Bearer token (code `unauthorized`); the answer never says which.",
		Headers: map[string]openapi.Header{"WWW-Authenticate": {
			Description: `Bearer realm="bot"`, Required: true, Schema: tString}},
		Content: map[string]openapi.MediaType{"application/json": {Schema: ref("Error")}},
	}},
	http.StatusNotFound: {"NotFound", errResponse("Not found; the code says what: `user_not_found`, `leader_not_found` or `token_not_found`.")},
	http.StatusMethodNotAllowed: {"MethodNotAllowed", openapi.Response{
		Description: "The path was asked with a method it does not take (code `method_not_allowed`): " +
			"the operations listed for a path are its only methods.",
		Headers: map[string]openapi.Header{"Allow": {
			Description: "The methods the path takes, e.g. GET.", Required: true,
			Schema: schema{"type": "string", "pattern": `^[A-Z]+(, [A-Z]+)*$`}}},
		Content: map[string]openapi.MediaType{"application/json": {Schema: ref("Error")}},
	}},
	http.StatusRequestTimeout: {"RequestTimeout", errResponse("The request body did not arrive within the server's read timeout " +
		"(code `request_timeout`). Nothing changed.")},
	http.StatusConflict: {"Conflict", errResponse("Conflicts with the current state; nothing changed. The code says what: " +
		"`telegram_taken`, `account_bound`, `no_preview` or `token_used`.")},
	http.StatusGone: {"Gone", errResponse("The connect token expired (code `token_expired`).")},
	http.StatusRequestEntityTooLarge: {"PayloadTooLarge", errResponse("The request body is larger than the server's cap " +
		"(SWITCHYARD_BODY_LIMIT, 1 MiB by default; code `body_too_large`), whatever the method. Nothing changed.")},
	http.StatusUnsupportedMediaType: {"UnsupportedMediaType", errResponse("The body is not declared as JSON (code " +
		"`unsupported_media_type`): Content-Type must be application/json, optionally with charset=utf-8. " +
		"A missing Content-Type is refused too. Nothing changed.")},
	http.StatusTooManyRequests: {"TooManyRequests", openapi.Response{
		Description: "Too many wrong secrets from this address (code `too_many_attempts`): no token is checked, " +
			"not even the right one, until Retry-After has passed.",
		Headers: map[string]openapi.Header{"Retry-After": {
			Description: "Seconds to wait before the next attempt.", Required: true,
			Schema: schema{"type": "integer", "minimum": 1}}},
		Content: map[string]openapi.MediaType{"application/json": {Schema: ref("Error")}},
	}},
	http.StatusInternalServerError: {"InternalError", errResponse("The server failed (code `internal`), e.g. the database " +
		"could not be written; the request may be sent again.")},
}

// always are the errors any operation can answer: the guard's (401, 429),
// the router's (405), the body cap's (413, checked before anything else)
// and a failure of the server's (500).
var always = []int{
	http.StatusUnauthorized, http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge,
	http.StatusTooManyRequests, http.StatusInternalServerError,
}

// withBody are the errors of an operation that reads a JSON body.
var withBody = []int{http.StatusBadRequest, http.StatusRequestTimeout, http.StatusUnsupportedMediaType}

// responses is ok plus a reference to the shared response of each of errs
// and of always.
func responses(ok map[string]openapi.Response, errs ...int) map[string]openapi.Response {
	out := make(map[string]openapi.Response, len(ok)+len(errs)+len(always))
	for code, r := range ok {
		out[code] = r
	}
	for _, code := range append(slices.Clone(always), errs...) {
		shared, ok := sharedResponses[code]
		if !ok {
			panic(fmt.Sprintf("bot: no shared OpenAPI response for %d", code))
		}
		out[strconv.Itoa(code)] = openapi.Response{Ref: "#/components/responses/" + shared.name}
	}
	return out
}

func query(name, desc string, required bool, s schema) openapi.Parameter {
	return openapi.Parameter{Name: name, In: "query", Required: required, Description: desc, Schema: s}
}

func op(id, summary string, params []openapi.Parameter, body *openapi.RequestBody, res map[string]openapi.Response) *openapi.Operation {
	return &openapi.Operation{Tags: []string{"bot"}, OperationID: id, Summary: summary, Security: botSecurity,
		Parameters: params, RequestBody: body, Responses: res}
}

// botSecurity is BotAuthGuard's: BOT_TO_BACKEND_SECRET as a Bearer token.
var botSecurity = []map[string][]string{{"botAuth": {}}}

// OpenAPI describes the bot's service API, the routes of Routes, mounted at
// the root (tag "bot"): the backend half of the bot outbox contract
// (specs/bot-outbox-contract.ru.txt), the outbox's pending/ack queue and the
// /bot/* service endpoints the onboarding bot calls. Every route needs
// Authorization: Bearer <BOT_TO_BACKEND_SECRET>; every Telegram id in an
// answer is decimal text.
func OpenAPI() openapi.Part {
	ok := func(desc, schemaName string) map[string]openapi.Response {
		return map[string]openapi.Response{"200": jsonResponse(desc, ref(schemaName))}
	}
	body := append([]int(nil), withBody...)
	part := openapi.Part{
		Responses: make(map[string]openapi.Response, len(sharedResponses)),
		SecuritySchemes: map[string]schema{"botAuth": {"type": "http", "scheme": "bearer",
			"description": "BOT_TO_BACKEND_SECRET, compared in constant time. Wrong secrets from one address are " +
				"throttled together with the process's other secrets (429)."}},
		Schemas: map[string]schema{
			"Error": openapi.ErrorSchema,
			"TelegramId": described(schema{"type": "string", "pattern": telegramIDPattern},
				"A Telegram user id: a positive int64 as decimal text, no sign, space or leading zero "+
					"(a bigint may not fit a float64). At most 9223372036854775807."),
			"EventType": schema{"type": "string", "enum": contract.EventTypes},
			"Event": object(schema{
				"id":         tID,
				"eventType":  ref("EventType"),
				"telegramId": described(schema{"type": []string{"string", "null"}, "pattern": telegramIDPattern}, "Telegram id as decimal text, or null."),
				"magnetUid":  schema{"type": []string{"integer", "null"}, "format": "int64"},
				"payload":    nullable("object"),
				"createdAt":  tTime,
				"attempts":   tInteger,
				"traceparent": described(schema{"type": "string", "pattern": traceparentPattern},
					"Optional: the W3C traceparent of the emit's span (bot.outbox.emit), for a consumer to link "+
						"its handling of the event to the backend action that emitted it. Absent when the emit "+
						"was not traced; added after the first version of the contract, so a consumer must not "+
						"require it."),
			}, "id", "eventType", "telegramId", "magnetUid", "payload", "createdAt", "attempts"),
			"PendingResponse": object(schema{"events": schema{"type": "array", "items": ref("Event")}}, "events"),
			"AckRequest": object(schema{
				"processedIds": described(schema{"type": []string{"array", "null"}, "items": tID}, "Events handled; null is no ids."),
				"retryIds":     described(schema{"type": []string{"array", "null"}, "items": tID}, "Events to retry with backoff; null is no ids."),
				"errors": described(schema{"type": "object", "propertyNames": schema{"pattern": `^[1-9][0-9]{0,18}$`}, "additionalProperties": tString},
					"Optional reason per retried event id (the key, as decimal text), stored as lastError."),
			}),
			"AckResult": object(schema{"processed": tInteger, "retried": tInteger, "deadLettered": tInteger, "closed": tInteger},
				"processed", "retried", "deadLettered", "closed"),
			"Leader": object(schema{"uid": tID, "link": tString, "name": tString}, "uid", "link", "name"),
			"UserState": object(schema{
				"isRegistrationConfirmed": tBool, "lp1": tBool, "lp2": tBool,
				"addr": nullable("string"), "timeActive": tTimeNull, "ownLink": tString,
			}, "isRegistrationConfirmed", "lp1", "lp2", "addr", "timeActive", "ownLink"),
			"BindRequest":  object(schema{"uid": tID, "telegramId": tTelegramIn}, "uid", "telegramId"),
			"BindResponse": object(schema{"uid": tID, "telegramId": ref("TelegramId")}, "uid", "telegramId"),
			"NewNotification": described(object(schema{
				"uid":        described(schema{"type": "integer", "format": "int64", "minimum": 0}, "The account; 0 or absent: the one telegramId is bound to."),
				"telegramId": tTelegramIn,
				"kind":       schema{"type": "string", "pattern": `^[a-z0-9_.-]{1,64}$`},
				"text":       described(schema{"type": "string", "minLength": 1, "maxLength": 4096}, "Not only spaces."),
				"dedupKey":   described(schema{"type": "string", "maxLength": 200}, "Optional (at most 200 bytes): a repeated write with the same key returns the first notification."),
			}, "kind", "text"), "uid or telegramId (bound) names the account; both must name the same one."),
			"Notification": object(schema{
				"id": tID, "uid": tID, "kind": tString, "text": tString,
				"dedupKey": nullable("string"), "createdAt": tTime, "readAt": tTimeNull,
			}, "id", "uid", "kind", "text", "dedupKey", "createdAt", "readAt"),
			"ConnectLinkRequest": object(schema{"uid": tID}, "uid"),
			"ConnectLink": object(schema{
				"token":      described(tString, "telegramConnect=<uuid>"),
				"startParam": described(tString, "telegramConnect-<uuid>: the token as a Telegram /start parameter."),
				"link":       described(tString, "https://t.me/<bot>?start=<startParam>"),
				"expiresAt":  described(tTime, "When the token expires: the same value on a mint and on every reuse."),
			}, "token", "startParam", "link", "expiresAt"),
			"RedeemRequest": object(schema{
				"token":      described(tString, "telegramConnect=<uuid>, telegramConnect-<uuid> or the bare uuid."),
				"telegramId": tTelegramIn,
			}, "token", "telegramId"),
			"Redemption":   object(schema{"uid": tID, "previewTelegramId": ref("TelegramId")}, "uid", "previewTelegramId"),
			"AccountCheck": object(schema{"exists": tBool, "uid": schema{"type": []string{"integer", "null"}, "format": "int64"}}, "exists", "uid"),
		},
	}
	for _, shared := range sharedResponses {
		part.Responses[shared.name] = shared.resp
	}
	telegramParam := described(ref("TelegramId"), "Bound Telegram id.")
	part.Tags = []openapi.Tag{{Name: "bot", Description: "Backend ↔ onboarding bot contract: the outbox's " +
		"pending/ack queue and the /bot/* service endpoints, behind BOT_TO_BACKEND_SECRET."}}
	part.Paths = map[string]openapi.PathItem{
		"/bot/events/pending": {"get": op("getPendingEvents",
			"Unprocessed, due events grouped by user, then by id",
			[]openapi.Parameter{
				query("limit", "Page size: an integer ≥ 1; default 100; a larger one is capped at 500 (the spec's "+
					"BOT_OUTBOX_MAX_PENDING_LIMIT), not refused.", false, schema{"type": "integer", "minimum": 1}),
				query("wait", "Long-poll: when nothing is pending, wait up to this many whole seconds for an event; "+
					"default 0. A larger wait is capped at 30, not refused, as limit is.", false,
					schema{"type": "integer", "minimum": 0}),
			}, nil,
			responses(ok("A page of events.", "PendingResponse"), http.StatusBadRequest))},
		"/bot/events/ack": {"post": op("ackEvents",
			"Mark events processed, or retry them with backoff (dead-letter or close after 10 attempts)",
			[]openapi.Parameter{{Name: contract.InstanceHeader, In: "header", Description: "Optional, beyond the " +
				"contract: the consumer's name (hostname:pid, up to 128 printable characters) in the events' " +
				"attempt history; absent or unusable, the backend names itself.",
				Schema: schema{"type": "string", "maxLength": 128}}},
			jsonBody(ref("AckRequest")),
			responses(ok("What the ack changed.", "AckResult"), body...))},
		"/bot/leader/resolve": {"get": op("resolveLeader",
			"Resolve a referral code (users.link) to its user",
			[]openapi.Parameter{query("code", "The referral code.", true, tString)}, nil,
			responses(ok("The leader.", "Leader"), http.StatusBadRequest, http.StatusNotFound))},
		"/bot/user/state": {"get": op("getUserState",
			"State of the account bound to a Telegram id, for the console gate",
			[]openapi.Parameter{query("telegramId", "Bound Telegram id.", true, telegramParam)}, nil,
			responses(ok("The state.", "UserState"), http.StatusBadRequest, http.StatusNotFound))},
		"/bot/telegram/bind": {"post": op("bindTelegram",
			"Promote previewTelegramId to telegramId after the in-bot confirmation (idempotent)",
			nil, jsonBody(ref("BindRequest")),
			responses(ok("Bound.", "BindResponse"), append(body, http.StatusNotFound, http.StatusConflict)...))},
		"/bot/notification": {"post": op("addNotification",
			"Store a web-cabinet notification (the fallback when a DM fails with 403)",
			nil, jsonBody(ref("NewNotification")),
			responses(map[string]openapi.Response{
				"201": jsonResponse("Stored.", ref("Notification")),
				"200": jsonResponse("Already stored under this dedupKey; the first one.", ref("Notification")),
			}, append(body, http.StatusNotFound)...))},
		"/bot/telegram/connect-link": {"post": op("mintConnectLink",
			"Mint, or reuse while unexpired, a one-time telegramConnect=<uuid> token and its t.me deep link",
			nil, jsonBody(ref("ConnectLinkRequest")),
			responses(ok("The token and link.", "ConnectLink"), append(body, http.StatusNotFound)...))},
		"/bot/telegram/connect-link/redeem": {"post": op("redeemConnectLink",
			"Redeem a connect token from /start: record previewTelegramId and mark the token used (idempotent per Telegram id)",
			nil, jsonBody(ref("RedeemRequest")),
			responses(ok("Redeemed.", "Redemption"), append(body, http.StatusNotFound, http.StatusConflict, http.StatusGone)...))},
		"/auth/check-account-by-telegram/{id}": {"get": op("checkAccountByTelegram",
			"Whether a Telegram id is bound to an account",
			[]openapi.Parameter{{Name: "id", In: "path", Required: true, Description: "Telegram id.", Schema: ref("TelegramId")}}, nil,
			responses(ok("The answer.", "AccountCheck"), http.StatusBadRequest))},
	}
	return part
}
