package bot

import "net/http"

// OpenAPIDocument is the OpenAPI 3 description of the bot's service API
// (every route of Routes but /openapi.json itself), tag "bot". A test walks
// the router and keeps it true.
type OpenAPIDocument struct {
	OpenAPI    string                                  `json:"openapi"`
	Info       OpenAPIInfo                             `json:"info"`
	Tags       []OpenAPITag                            `json:"tags"`
	Security   []map[string][]string                   `json:"security"`
	Paths      map[string]map[string]*OpenAPIOperation `json:"paths"`
	Components OpenAPIComponents                       `json:"components"`
}

// OpenAPIInfo is the document's info object.
type OpenAPIInfo struct {
	Title       string `json:"title"`
	Version     string `json:"version"`
	Description string `json:"description"`
}

// OpenAPITag is a tag object.
type OpenAPITag struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// OpenAPIOperation is an operation object.
type OpenAPIOperation struct {
	Tags        []string                   `json:"tags"`
	OperationID string                     `json:"operationId"`
	Summary     string                     `json:"summary"`
	Parameters  []OpenAPIParameter         `json:"parameters,omitempty"`
	RequestBody *OpenAPIRequestBody        `json:"requestBody,omitempty"`
	Responses   map[string]OpenAPIResponse `json:"responses"`
}

// OpenAPIParameter is a parameter object.
type OpenAPIParameter struct {
	Name        string `json:"name"`
	In          string `json:"in"`
	Required    bool   `json:"required"`
	Description string `json:"description"`
	Schema      schema `json:"schema"`
}

// OpenAPIRequestBody is a request body object (JSON only).
type OpenAPIRequestBody struct {
	Required bool                        `json:"required"`
	Content  map[string]OpenAPIMediaType `json:"content"`
}

// OpenAPIResponse is a response object.
type OpenAPIResponse struct {
	Description string                      `json:"description"`
	Content     map[string]OpenAPIMediaType `json:"content,omitempty"`
}

// OpenAPIMediaType is a media type object.
type OpenAPIMediaType struct {
	Schema schema `json:"schema"`
}

// OpenAPIComponents holds the schemas and the security scheme.
type OpenAPIComponents struct {
	Schemas         map[string]schema `json:"schemas"`
	SecuritySchemes map[string]schema `json:"securitySchemes"`
}

type schema = map[string]any

func ref(name string) schema { return schema{"$ref": "#/components/schemas/" + name} }

func object(props schema, required ...string) schema {
	s := schema{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func typ(t string) schema { return schema{"type": t} }

func nullable(t string) schema { return schema{"type": []string{t, "null"}} }

// described returns a copy of s with a description (s may be shared).
func described(s schema, d string) schema {
	c := make(schema, len(s)+1)
	for k, v := range s {
		c[k] = v
	}
	c["description"] = d
	return c
}

var (
	tInteger  = typ("integer")
	tString   = typ("string")
	tBool     = typ("boolean")
	tTime     = schema{"type": "string", "format": "date-time"}
	tTimeNull = schema{"type": []string{"string", "null"}, "format": "date-time"}
	tTelegram = described(schema{"type": "string", "pattern": "^[1-9][0-9]{0,18}$"},
		"Telegram user id: a bigint as decimal text (a JSON number is accepted on input).")
)

func jsonBody(s schema) *OpenAPIRequestBody {
	return &OpenAPIRequestBody{Required: true, Content: map[string]OpenAPIMediaType{"application/json": {Schema: s}}}
}

func jsonResponse(desc string, s schema) OpenAPIResponse {
	return OpenAPIResponse{Description: desc, Content: map[string]OpenAPIMediaType{"application/json": {Schema: s}}}
}

func errResponse(desc string) OpenAPIResponse { return jsonResponse(desc, ref("Error")) }

// responses adds the error answers every guarded route has to ok.
func responses(ok map[string]OpenAPIResponse, errs ...int) map[string]OpenAPIResponse {
	out := map[string]OpenAPIResponse{
		"400": errResponse("Bad input; nothing changed."),
		"401": errResponse("Missing, malformed or wrong Bearer token (the answer never says which)."),
		"429": errResponse("Too many wrong secrets from this address: the token is not checked until Retry-After (seconds) has passed."),
	}
	for code, r := range ok {
		out[code] = r
	}
	for _, code := range errs {
		switch code {
		case http.StatusNotFound:
			out["404"] = errResponse("Not found.")
		case http.StatusConflict:
			out["409"] = errResponse("Conflicts with the current state; nothing changed.")
		case http.StatusGone:
			out["410"] = errResponse("The token expired.")
		}
	}
	return out
}

func query(name, desc string, required bool, s schema) OpenAPIParameter {
	return OpenAPIParameter{Name: name, In: "query", Required: required, Description: desc, Schema: s}
}

func op(id, summary string, params []OpenAPIParameter, body *OpenAPIRequestBody, res map[string]OpenAPIResponse) *OpenAPIOperation {
	return &OpenAPIOperation{Tags: []string{"bot"}, OperationID: id, Summary: summary, Parameters: params, RequestBody: body, Responses: res}
}

// OpenAPI returns the document served at GET /openapi.json.
func OpenAPI() OpenAPIDocument {
	return OpenAPIDocument{
		OpenAPI: "3.1.0",
		Info: OpenAPIInfo{
			Title:   "Switchyard bot service API",
			Version: "1",
			Description: "The backend half of the bot outbox contract (specs/bot-outbox-contract.ru.txt): " +
				"the outbox's pending/ack queue and the /bot/* service endpoints the onboarding bot calls. " +
				"Every route needs Authorization: Bearer <BOT_TO_BACKEND_SECRET>.",
		},
		Tags:     []OpenAPITag{{Name: "bot", Description: "Backend ↔ onboarding bot contract."}},
		Security: []map[string][]string{{"botAuth": {}}},
		Paths: map[string]map[string]*OpenAPIOperation{
			"/bot/events/pending": {"get": op("getPendingEvents",
				"Unprocessed, due events grouped by user, then by id",
				[]OpenAPIParameter{
					query("limit", "Page size: an integer ≥ 1; default 100, capped at 500.", false, schema{"type": "integer", "minimum": 1}),
					query("wait", "Long-poll: wait up to this many seconds (at most 30) for an event when none is pending.", false,
						schema{"type": "integer", "minimum": 0, "maximum": 30}),
				}, nil,
				responses(map[string]OpenAPIResponse{"200": jsonResponse("A page of events.", ref("PendingResponse"))}))},
			"/bot/events/ack": {"post": op("ackEvents",
				"Mark events processed, or retry them with backoff (dead-letter or close after 10 attempts)",
				nil, jsonBody(ref("AckRequest")),
				responses(map[string]OpenAPIResponse{"200": jsonResponse("What the ack changed.", ref("AckResult"))}))},
			"/bot/leader/resolve": {"get": op("resolveLeader",
				"Resolve a referral code (users.link) to its user",
				[]OpenAPIParameter{query("code", "The referral code.", true, tString)}, nil,
				responses(map[string]OpenAPIResponse{"200": jsonResponse("The leader.", ref("Leader"))}, http.StatusNotFound))},
			"/bot/user/state": {"get": op("getUserState",
				"State of the account bound to a Telegram id, for the console gate",
				[]OpenAPIParameter{query("telegramId", "Bound Telegram id.", true, tTelegram)}, nil,
				responses(map[string]OpenAPIResponse{"200": jsonResponse("The state.", ref("UserState"))}, http.StatusNotFound))},
			"/bot/telegram/bind": {"post": op("bindTelegram",
				"Promote previewTelegramId to telegramId after the in-bot confirmation (idempotent)",
				nil, jsonBody(ref("BindRequest")),
				responses(map[string]OpenAPIResponse{"200": jsonResponse("Bound.", ref("BindResponse"))}, http.StatusNotFound, http.StatusConflict))},
			"/bot/notification": {"post": op("addNotification",
				"Store a web-cabinet notification (the fallback when a DM fails with 403)",
				nil, jsonBody(ref("NewNotification")),
				responses(map[string]OpenAPIResponse{
					"201": jsonResponse("Stored.", ref("Notification")),
					"200": jsonResponse("Already stored under this dedupKey; the first one.", ref("Notification")),
				}, http.StatusNotFound))},
			"/bot/telegram/connect-link": {"post": op("mintConnectLink",
				"Mint, or reuse while unexpired, a one-time telegramConnect=<uuid> token and its t.me deep link",
				nil, jsonBody(ref("ConnectLinkRequest")),
				responses(map[string]OpenAPIResponse{"200": jsonResponse("The token and link.", ref("ConnectLink"))}, http.StatusNotFound))},
			"/bot/telegram/connect-link/redeem": {"post": op("redeemConnectLink",
				"Redeem a connect token from /start: record previewTelegramId and mark the token used (idempotent per Telegram id)",
				nil, jsonBody(ref("RedeemRequest")),
				responses(map[string]OpenAPIResponse{"200": jsonResponse("Redeemed.", ref("Redemption"))},
					http.StatusNotFound, http.StatusConflict, http.StatusGone))},
			"/auth/check-account-by-telegram/{id}": {"get": op("checkAccountByTelegram",
				"Whether a Telegram id is bound to an account",
				[]OpenAPIParameter{{Name: "id", In: "path", Required: true, Description: "Telegram id.", Schema: tTelegram}}, nil,
				responses(map[string]OpenAPIResponse{"200": jsonResponse("The answer.", ref("AccountCheck"))}))},
		},
		Components: OpenAPIComponents{
			SecuritySchemes: map[string]schema{"botAuth": {"type": "http", "scheme": "bearer",
				"description": "BOT_TO_BACKEND_SECRET, compared in constant time."}},
			Schemas: map[string]schema{
				"Error":     object(schema{"error": object(schema{"code": tString, "message": tString}, "code", "message")}, "error"),
				"EventType": schema{"type": "string", "enum": EventTypes},
				"Event": object(schema{
					"id":         tInteger,
					"eventType":  ref("EventType"),
					"telegramId": described(nullable("string"), "Telegram id as decimal text."),
					"magnetUid":  nullable("integer"),
					"payload":    nullable("object"),
					"createdAt":  tTime,
					"attempts":   tInteger,
				}, "id", "eventType", "telegramId", "magnetUid", "payload", "createdAt", "attempts"),
				"PendingResponse": object(schema{"events": schema{"type": "array", "items": ref("Event")}}, "events"),
				"AckRequest": object(schema{
					"processedIds": schema{"type": "array", "items": tInteger},
					"retryIds":     schema{"type": "array", "items": tInteger},
					"errors": described(schema{"type": "object", "additionalProperties": tString},
						"Optional reason per retried event id, stored as lastError."),
				}),
				"AckResult": object(schema{"processed": tInteger, "retried": tInteger, "deadLettered": tInteger, "closed": tInteger},
					"processed", "retried", "deadLettered", "closed"),
				"Leader": object(schema{"uid": tInteger, "link": tString, "name": tString}, "uid", "link", "name"),
				"UserState": object(schema{
					"isRegistrationConfirmed": tBool, "lp1": tBool, "lp2": tBool,
					"addr": nullable("string"), "timeActive": tTimeNull, "ownLink": tString,
				}, "isRegistrationConfirmed", "lp1", "lp2", "addr", "timeActive", "ownLink"),
				"BindRequest":  object(schema{"uid": tInteger, "telegramId": tTelegram}, "uid", "telegramId"),
				"BindResponse": object(schema{"uid": tInteger, "telegramId": tTelegram}, "uid", "telegramId"),
				"NewNotification": described(object(schema{
					"uid": tInteger, "telegramId": tTelegram, "kind": tString, "text": tString,
					"dedupKey": described(tString, "Optional: a repeated write with the same key returns the first notification."),
				}, "kind", "text"), "uid or telegramId (bound) names the account."),
				"Notification": object(schema{
					"id": tInteger, "uid": tInteger, "kind": tString, "text": tString,
					"dedupKey": nullable("string"), "createdAt": tTime, "readAt": tTimeNull,
				}, "id", "uid", "kind", "text", "dedupKey", "createdAt", "readAt"),
				"ConnectLinkRequest": object(schema{"uid": tInteger}, "uid"),
				"ConnectLink": object(schema{
					"token":      described(tString, "telegramConnect=<uuid>"),
					"startParam": described(tString, "telegramConnect-<uuid>: the token as a Telegram /start parameter."),
					"link":       described(tString, "https://t.me/<bot>?start=<startParam>"),
					"expiresAt":  tTime,
				}, "token", "startParam", "link", "expiresAt"),
				"RedeemRequest": object(schema{
					"token":      described(tString, "telegramConnect=<uuid>, telegramConnect-<uuid> or the bare uuid."),
					"telegramId": tTelegram,
				}, "token", "telegramId"),
				"Redemption":   object(schema{"uid": tInteger, "previewTelegramId": tTelegram}, "uid", "previewTelegramId"),
				"AccountCheck": object(schema{"exists": tBool, "uid": nullable("integer")}, "exists", "uid"),
			},
		},
	}
}
