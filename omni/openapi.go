package omni

import (
	"net/http"

	"switchyard/openapi"
)

// AdminOpenAPI describes the routes of AdminRoutes (tag "chat"), relative to
// the admin API's root.
func AdminOpenAPI() openapi.Part {
	type schema = openapi.Schema
	var (
		ref, object, described = openapi.Ref, openapi.Object, openapi.Described
		str, integer           = openapi.String, openapi.Integer
	)
	omitted := func(s schema) schema { return described(s, "Left out when empty.") }
	p := openapi.AdminPart()
	p.Tags = []openapi.Tag{{Name: "chat", Description: "The chat platform's operators: threads with contacts, their " +
		"messages with delivery status, replies (queued on sender.flow and delivered by the outbound role) and the " +
		"acknowledgement rule."}}
	p.Schemas = map[string]schema{
		"Error": openapi.ErrorSchema,
		"ChatContact": object(schema{
			"id": openapi.ID, "provider": openapi.Enum(ProviderTelegram),
			"providerUserId":       described(str, "The contact's id at the provider (a Telegram user id)."),
			"businessConnectionId": omitted(str),
			"name":                 str, "username": omitted(str),
			"reachable":         described(openapi.Bool, "false once the contact blocked the bot or the bot left the chat."),
			"unreachableReason": omitted(str),
		}, "id", "provider", "providerUserId", "name", "reachable"),
		"ChatThread": object(schema{
			"id": openapi.ID, "channel": openapi.Enum(ChannelTelegramBot, ChannelTelegramBusiness),
			"businessConnectionId": described(str, `The business connection of a telegram_business thread; "" otherwise.`),
			"contact":              ref("ChatContact"),
			"state":                described(openapi.Enum(ThreadOpen, ThreadClosed), "A closed thread opens again when its contact writes."),
			"unread":               described(integer, "The contact's messages since an operator last read or answered the thread."),
			"lastMessageAt":        openapi.TimeNull,
			"botId":                described(str, "The bot the thread's updates come through."),
			"chatId":               described(str, "The chat at the provider."),
		}, "id", "channel", "businessConnectionId", "contact", "state", "unread", "lastMessageAt", "botId", "chatId"),
		"ChatMessage": object(schema{
			"id": openapi.ID, "threadId": openapi.ID,
			"seq":       described(integer, "The message's position in its thread."),
			"direction": openapi.Enum(DirectionInbound, DirectionOutbound),
			"origin": described(openapi.Enum(OriginProvider, OriginOperator, OriginRule),
				"provider: from the provider (the contact, or the business account's owner); operator: a reply; rule: the acknowledgement."),
			"kind": openapi.Enum(KindText, KindMedia, KindCallback, KindService), "text": str,
			"status": described(openapi.Enum(StatusReceived, StatusQueued, StatusSending, StatusSent, StatusRetrying, StatusFailed),
				"Inbound messages are received; outbound ones move queued → sending → sent, or → retrying and back, or → failed."),
			"providerMessageId": described(openapi.Nullable("string"), "The message's id at the provider; null until it is sent."),
			"attempts":          described(integer, "Delivery attempts so far."),
			"nextAttemptAt":     described(openapi.Time, "When a retrying message is tried again."),
			"failureReason":     omitted(str),
			"editedAt":          described(openapi.Time, "Present once the message was edited."),
			"deletedAt":         described(openapi.Time, "Present once the message was deleted."),
			"sentAt":            described(openapi.Time, "Present once the message was sent."),
			"createdAt":         openapi.Time,
		}, "id", "threadId", "seq", "direction", "origin", "kind", "text", "status", "providerMessageId", "attempts", "createdAt"),
		"AutoAckRule": described(object(schema{"enabled": openapi.Bool, "text": str}, "enabled", "text"),
			"The acknowledgement of a contact's first message in a private thread, with a fixed text."),
	}
	tag := "chat"
	threadID := []openapi.Parameter{openapi.PathParam("id", "The thread's id.", openapi.ID)}
	positive := schema{"type": "integer", "minimum": 1}
	seq := func(name, desc string, minimum int) openapi.Parameter {
		return openapi.Query(name, desc, false, schema{"type": "integer", "format": "int64", "minimum": minimum})
	}
	write := []int{http.StatusBadRequest, http.StatusNotFound, http.StatusServiceUnavailable}
	for _, r := range []struct {
		method, path string
		op           openapi.AdminOp
	}{
		{"GET", "/omni/threads", openapi.AdminOp{Tag: tag, ID: "listChatThreads", Summary: "Threads, latest activity first",
			Params: []openapi.Parameter{
				openapi.Query("state", "Only open or only closed threads; both when left out.", false, openapi.Enum(ThreadOpen, ThreadClosed)),
				openapi.Query("q", "A search term (at most 200 bytes): a number finds a contact's Telegram user id or a "+
					"thread's id; text finds a contact's name or username (a leading @ is dropped) or a message's text.", false, str),
				openapi.Query("before", "The nextBefore of the previous window (an older window).", false, str),
				openapi.Query("after", "A thread's key (<last message time>_<id>): the newer window after it, nearest first.", false, str),
				openapi.Query("limit", "At most this many (default 100; more than 500 is 500).", false, positive),
			},
			OK: openapi.OK("A window of threads.", object(schema{
				"threads": openapi.ArrayOf(ref("ChatThread")),
				"nextBefore": described(str, "Present when the window is full (and after was not given): "+
					"pass it as before for the next one."),
			}, "threads")),
			Errs: []int{http.StatusBadRequest}}},
		{"GET", "/omni/threads/{id}/messages", openapi.AdminOp{Tag: tag, ID: "listChatMessages", Summary: "A thread's messages",
			Description: "In thread order (seq ascending); with newest=true or before, latest first.",
			Params: append(threadID,
				seq("after", "Only messages after this position (seq).", 0),
				seq("before", "Only messages before this position (seq), latest first.", 1),
				openapi.Query("newest", "true: the thread from its latest message back.", false, openapi.Bool),
				openapi.Query("limit", "At most this many (default 500; more than 1000 is 1000).", false, positive),
			),
			OK:   openapi.OK("The messages.", object(schema{"messages": openapi.ArrayOf(ref("ChatMessage"))}, "messages")),
			Errs: []int{http.StatusBadRequest, http.StatusNotFound}}},
		{"POST", "/omni/threads/{id}/messages", openapi.AdminOp{Tag: tag, ID: "replyInChatThread", Summary: "Reply in a thread",
			Description: "The message (queued) and its send command on sender.flow commit together; the outbound role " +
				"delivers it. Follow its status with getChatMessage. Replying marks the thread read.",
			Params: threadID,
			Body: openapi.JSONBody(object(schema{"text": described(schema{"type": "string", "minLength": 1, "maxLength": MaxReplyRunes},
				"Not only white space.")}, "text")),
			OK: map[string]openapi.Response{"202": openapi.JSONResponse("Queued.", object(schema{
				"messageId": openapi.ID, "status": openapi.Enum(StatusQueued),
			}, "messageId", "status"))},
			Errs: write}},
		{"POST", "/omni/threads/{id}/close", openapi.AdminOp{Tag: tag, ID: "closeChatThread", Summary: "Close a thread",
			Description: "The contact's next message opens it again.",
			Params:      threadID, OK: map[string]openapi.Response{"204": {Description: "Closed."}}, Errs: write}},
		{"POST", "/omni/threads/{id}/read", openapi.AdminOp{Tag: tag, ID: "readChatThread", Summary: "Clear a thread's unread count",
			Params: threadID, OK: map[string]openapi.Response{"204": {Description: "Read."}}, Errs: write}},
		{"GET", "/omni/messages/{id}", openapi.AdminOp{Tag: tag, ID: "getChatMessage", Summary: "A message with its delivery status",
			Params: []openapi.Parameter{openapi.PathParam("id", "The message's id.", openapi.ID)},
			OK:     openapi.OK("The message.", ref("ChatMessage")), Errs: []int{http.StatusBadRequest, http.StatusNotFound}}},
		{"GET", "/omni/rules/auto-ack", openapi.AdminOp{Tag: tag, ID: "getAutoAckRule", Summary: "The acknowledgement rule",
			Description: "The rule an operator set, else the configured default.",
			OK:          openapi.OK("The rule in force.", ref("AutoAckRule"))}},
		{"PUT", "/omni/rules/auto-ack", openapi.AdminOp{Tag: tag, ID: "setAutoAckRule", Summary: "Change the acknowledgement rule",
			Description: "It wins over the configured default from then on. A field left out is false or empty.",
			Body: openapi.JSONBody(object(schema{
				"enabled": openapi.Bool,
				"text": described(schema{"type": "string", "maxLength": MaxReplyRunes},
					"The acknowledgement; an enabled rule needs one that is not only white space."),
			})),
			OK: openapi.OK("The rule stored.", ref("AutoAckRule")), Errs: []int{http.StatusServiceUnavailable}}},
	} {
		r.op.Add(p, r.method, r.path)
	}
	return p
}
