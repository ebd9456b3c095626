package sandbox

import (
	"net/http"

	"switchyard/openapi"
	"switchyard/telegram/fakebot"
)

// AdminOpenAPI describes the routes of AdminRoutes (tag "sandbox"),
// relative to the admin API's root.
func AdminOpenAPI() openapi.Part {
	type schema = openapi.Schema
	var (
		ref, object, described = openapi.Ref, openapi.Object, openapi.Described
		str, integer           = openapi.String, openapi.Integer
	)
	omitted := func(s schema, d string) schema { return described(s, d+" Left out when empty.") }
	bot := described(openapi.Enum(BotOnboarding, BotChat), "The sandboxed bot: onboarding (the default) or chat.")
	firstName := described(str, "The user's first name when the sandbox does not know them yet, or to rename them "+
		`(at most 64 characters); default "User <id>".`)
	p := openapi.AdminPart()
	p.Tags = []openapi.Tag{{Name: "sandbox", Description: "The built-in fake Telegram (served only while a bot runs on it): " +
		"what each sandboxed bot's users see, and the actions of Telegram users — /start, write, press a button, " +
		"block, write to a connected business account."}}
	p.Schemas = map[string]schema{
		"Error": openapi.ErrorSchema,
		"SandboxConnection": object(schema{
			"id": str, "ownerId": described(integer, "The business account's owner (a Telegram user id)."),
			"enabled": openapi.Bool, "canReply": openapi.Bool,
		}, "id", "ownerId", "enabled", "canReply"),
		"SandboxButton": object(schema{
			"text": str, "data": omitted(str, "The callback data."), "url": omitted(str, "The button's link."),
		}, "text"),
		"SandboxMessage": object(schema{
			"messageId": integer, "from": openapi.Enum(fakebot.SenderBot, fakebot.SenderUser),
			"text":    described(str, "As the user sees it, without markup."),
			"buttons": omitted(openapi.ArrayOf(openapi.ArrayOf(ref("SandboxButton"))), "The inline keyboard, by rows."),
			"deleted": omitted(openapi.Bool, "true once the bot deleted it."),
		}, "messageId", "from", "text"),
		"SandboxChat": object(schema{
			"chatId": integer, "userId": integer, "title": str,
			"businessConnectionId": omitted(str, "The connection of a business chat."),
			"blocked":              described(openapi.Bool, "The user blocked the bot."),
			"messages":             openapi.ArrayOf(ref("SandboxMessage")),
		}, "chatId", "userId", "title", "blocked", "messages"),
		"SandboxBot": object(schema{
			"bot": openapi.Enum(BotOnboarding, BotChat), "id": integer, "username": str,
			"token": described(str, "The bot's token on the sandbox (random per database): what a program "+
				"driving the sandbox as the bot calls it with."),
			"connections": openapi.ArrayOf(ref("SandboxConnection")),
			"chats":       openapi.ArrayOf(ref("SandboxChat")),
		}, "bot", "id", "username", "token", "connections", "chats"),
		"SandboxSent": object(schema{
			"messageId": integer, "chatId": integer,
			"businessConnectionId": omitted(str, "The connection of a business message."),
		}, "messageId", "chatId"),
	}
	tag := "sandbox"
	user := []openapi.Parameter{openapi.PathParam("id", "The Telegram user's id.", openapi.ID)}
	sent := openapi.OK("The user's message as the bot receives it.", ref("SandboxSent"))
	done := map[string]openapi.Response{"204": {Description: "Done."}}
	bad, missing, refused := http.StatusBadRequest, http.StatusNotFound, http.StatusConflict
	for _, r := range []struct {
		method, path string
		op           openapi.AdminOp
	}{
		{"GET", "/sandbox", openapi.AdminOp{Tag: tag, ID: "getSandbox", Summary: "The sandboxed bots, their chats and connections",
			OK: openapi.OK("What each sandboxed bot's users see.",
				object(schema{"bots": openapi.ArrayOf(ref("SandboxBot"))}, "bots"))}},
		{"POST", "/sandbox/users/{id}/start", openapi.AdminOp{Tag: tag, ID: "sandboxStart", Summary: "A user opens the bot: /start <payload>",
			Description: "A user who had blocked the bot unblocks it first, as Telegram's Restart does. The body may be left out.",
			Params:      user,
			Body: openapi.OptionalJSONBody(object(schema{
				"payload":   described(str, "The deep link's payload (a referral code, a telegramConnect token); none is a plain /start."),
				"firstName": firstName, "bot": bot,
			})),
			OK: sent, Errs: []int{bad, missing}}},
		{"POST", "/sandbox/users/{id}/messages", openapi.AdminOp{Tag: tag, ID: "sandboxSend", Summary: "A user writes to the bot",
			Params: user,
			Body: openapi.JSONBody(object(schema{
				"text": described(schema{"type": "string", "minLength": 1}, "Not only white space."), "firstName": firstName, "bot": bot,
			}, "text")),
			OK: sent, Errs: []int{bad, missing}}},
		{"POST", "/sandbox/users/{id}/press", openapi.AdminOp{Tag: tag, ID: "sandboxPress", Summary: "A user presses an inline button",
			Params: user,
			Body: openapi.JSONBody(object(schema{
				"data": described(schema{"type": "string", "minLength": 1}, "The button's callback data."),
				"messageId": described(schema{"type": "integer", "minimum": 0},
					"The bot's message carrying the button; 0 or left out: the latest that does."),
				"bot": bot,
			}, "data")),
			OK: openapi.OK("Pressed: the bot receives the callback query.",
				object(schema{"callbackQueryId": str}, "callbackQueryId")),
			Errs: []int{bad, missing, refused}}},
		{"POST", "/sandbox/users/{id}/block", openapi.AdminOp{Tag: tag, ID: "sandboxBlock", Summary: "A user blocks the bot",
			Description: "The body may be left out.", Params: user,
			Body: openapi.OptionalJSONBody(object(schema{"bot": bot})), OK: done, Errs: []int{bad, missing}}},
		{"POST", "/sandbox/users/{id}/unblock", openapi.AdminOp{Tag: tag, ID: "sandboxUnblock", Summary: "A user unblocks the bot",
			Description: "The body may be left out.", Params: user,
			Body: openapi.OptionalJSONBody(object(schema{"bot": bot})), OK: done, Errs: []int{bad, missing}}},
		{"POST", "/sandbox/users/{id}/business-message", openapi.AdminOp{Tag: tag, ID: "sandboxBusinessMessage",
			Summary:     "A customer writes to a business account connected to the chat bot",
			Description: "Without connectionId: the latest enabled connection, made (with a default owner) when there is none.",
			Params:      user,
			Body: openapi.JSONBody(object(schema{
				"text": described(schema{"type": "string", "minLength": 1}, "Not only white space."), "firstName": firstName,
				"connectionId": described(str, "The business connection."),
			}, "text")),
			OK: sent, Errs: []int{bad, missing, refused}}},
		{"POST", "/sandbox/business-connections", openapi.AdminOp{Tag: tag, ID: "sandboxConnectBusiness",
			Summary: "A business account's owner connects the chat bot, with the right to reply",
			Body: openapi.JSONBody(object(schema{
				"ownerId": described(openapi.ID, "The owner's Telegram user id."), "firstName": firstName,
			}, "ownerId")),
			OK:   map[string]openapi.Response{"201": openapi.JSONResponse("Connected.", ref("SandboxConnection"))},
			Errs: []int{bad, missing}}},
	} {
		r.op.Add(p, r.method, r.path)
	}
	return p
}
