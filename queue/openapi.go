package queue

import (
	"net/http"

	"switchyard/openapi"
)

// AdminOpenAPI describes the routes of AdminRoutes (tags "queues" and
// "topics"), relative to the admin API's root.
func AdminOpenAPI() openapi.Part {
	var (
		ref       = openapi.Ref
		object    = openapi.Object
		str       = openapi.String
		integer   = openapi.Integer
		number    = openapi.Number
		described = openapi.Described
	)
	count := described(integer, "A count.")
	nullableStr := openapi.Nullable("string")
	pause := openapi.Schema{
		"paused":      openapi.Bool,
		"pausedAt":    openapi.TimeNull,
		"pausedBy":    described(str, `Who paused it ("admin API" or "console"); "" while it runs.`),
		"pauseReason": described(str, `Why, as given; "" while it runs.`),
	}
	with := func(props openapi.Schema, more openapi.Schema) openapi.Schema {
		out := openapi.Schema{}
		for k, v := range props {
			out[k] = v
		}
		for k, v := range more {
			out[k] = v
		}
		return out
	}
	pauseRequired := []string{"paused", "pausedAt", "pausedBy", "pauseReason"}
	payload := openapi.Schema{
		"payload": described(openapi.AnyJSON, "The body: as JSON when it is JSON, as a string when it is UTF-8 text, "+
			"else as base64 text (payloadEncoding says which)."),
		"payloadEncoding": openapi.Enum("json", "text", "base64"),
	}
	groupProps := with(openapi.Schema{
		"group": str, "lag": count, "retrying": count, "dead": count,
		"oldestAgeSeconds": number,
		"members":          described(openapi.ArrayOf(str), "The subscribers (process instances) holding the group now."),
		"partitions":       openapi.ArrayOf(ref("QueueGroupPartition")),
	}, pause)
	groupRequired := append([]string{"group", "lag", "retrying", "dead", "oldestAgeSeconds", "members", "partitions"}, pauseRequired...)

	p := openapi.AdminPart()
	p.Tags = []openapi.Tag{
		{Name: "queues", Description: "Durable queues (goqite): their messages, dead letters, pause and purge."},
		{Name: "topics", Description: "Partitioned topics: publish, read the retained log, consumer groups and their dead letters."},
	}
	p.Schemas = map[string]openapi.Schema{
		"Error": openapi.ErrorSchema,
		"Queue": object(with(openapi.Schema{
			"name": str, "ready": count, "delayed": count, "held": count, "inFlight": count, "dead": count,
			"oldestAt":         openapi.TimeNull,
			"oldestAgeSeconds": number,
		}, pause), append([]string{"name", "ready", "delayed", "held", "inFlight", "dead", "oldestAt", "oldestAgeSeconds"}, pauseRequired...)...),
		"QueueMessage": object(with(openapi.Schema{
			"id": str, "state": openapi.Enum(StateReady, StateDelayed, StateHeld, StateInFlight),
			"orderKey": str, "priority": integer, "attempts": integer, "lastError": str,
			"sentAt": openapi.Time, "visibleAt": openapi.TimeNull,
		}, payload), "id", "state", "payload", "payloadEncoding", "priority", "attempts", "sentAt", "visibleAt"),
		"DeadLetter": object(with(openapi.Schema{
			"id": str, "state": openapi.Enum("dead"), "queue": described(str, "The queue, or the topic of a group's."),
			"group": str, "partition": integer, "offset": integer, "key": str, "orderKey": str,
			"attempts": integer, "lastError": str,
			"createdAt": openapi.Time, "firstFailedAt": openapi.Time, "deadAt": openapi.Time,
			"traceparent": described(str, "The trace context the message or record carried; a redrive carries it on."),
		}, payload), "id", "state", "queue", "payload", "payloadEncoding", "attempts", "lastError", "createdAt", "firstFailedAt", "deadAt"),
		"QueueMessagePage": described(object(openapi.Schema{
			"messages": openapi.ArrayOf(openapi.Schema{"anyOf": []openapi.Schema{ref("QueueMessage"), ref("DeadLetter")}}),
			"total":    described(count, "How many the filter selects in all."),
			"next":     described(nullableStr, "The cursor of the next window, null at the end of the list."),
		}, "messages", "total", "next"), "A window of a list: live messages, or dead letters (state=dead)."),
		"DeadLetterPage": object(openapi.Schema{
			"messages": openapi.ArrayOf(ref("DeadLetter")),
			"total":    described(count, "How many the filter selects in all."),
			"next":     described(nullableStr, "The cursor of the next window, null at the end of the list."),
		}, "messages", "total", "next"),
		"Attempt": object(openapi.Schema{
			"attempt": integer, "outcome": openapi.Enum(OutcomeDone, OutcomeRetry, OutcomeDead, OutcomeRedriven),
			"error": str, "at": openapi.Time,
			"durationMs": described(openapi.Nullable("number"), "How long the handler ran; null when unknown."),
			"instance":   described(str, "The process that ran it."),
		}, "attempt", "outcome", "at", "durationMs"),
		"Attempts": object(openapi.Schema{"attempts": openapi.ArrayOf(ref("Attempt"))}, "attempts"),
		"DeadLetterDetail": object(openapi.Schema{
			"deadLetter": ref("DeadLetter"), "attempts": openapi.ArrayOf(ref("Attempt")),
		}, "deadLetter", "attempts"),
		"BulkDeadLetters": described(object(openapi.Schema{
			"ids": described(openapi.Schema{"type": "array", "items": str, "minItems": 1, "maxItems": MaxIDs},
				"The dead letters to act on, in one transaction."),
			"q": described(openapi.Schema{"type": "string", "maxLength": maxSearch}, "Act on every dead letter this search finds."),
		}), "ids or q, not both; no body acts on every dead letter."),
		"Redriven":     object(openapi.Schema{"redriven": count}, "redriven"),
		"Purged":       object(openapi.Schema{"purged": count}, "purged"),
		"PauseRequest": object(openapi.Schema{"reason": openapi.Schema{"type": "string", "maxLength": 500}}),
		"PauseState": object(with(openapi.Schema{
			"queue": str, "topic": str, "group": str,
		}, pause), pauseRequired...),
		"Topic": object(openapi.Schema{
			"name": str, "retentionSeconds": integer,
			"partitions": openapi.ArrayOf(object(openapi.Schema{"partition": integer, "startOffset": integer, "endOffset": integer},
				"partition", "startOffset", "endOffset")),
			"groups": openapi.ArrayOf(ref("QueueGroup")),
		}, "name", "retentionSeconds", "partitions", "groups"),
		"QueueGroup": object(groupProps, groupRequired...),
		"QueueGroupInfo": object(with(groupProps, openapi.Schema{"createdAt": openapi.Time, "active": openapi.Bool}),
			append(groupRequired, "createdAt", "active")...),
		"QueueGroupPartition": object(openapi.Schema{
			"partition": integer, "committedOffset": integer, "endOffset": integer, "lag": count,
			"oldestAt": openapi.TimeNull, "oldestAgeSeconds": number,
			"owner": described(str, `The instance holding the partition's lease, "" when none does.`), "leaseExpiresAt": openapi.TimeNull,
		}, "partition", "committedOffset", "endOffset", "lag", "oldestAt", "oldestAgeSeconds", "owner", "leaseExpiresAt"),
		"CreateGroup": object(openapi.Schema{
			"group": str, "start": described(openapi.Enum("earliest", "latest"), "Where a new group starts reading; default earliest."),
		}, "group"),
		"Position":  object(openapi.Schema{"partition": integer, "offset": integer}, "partition", "offset"),
		"Positions": object(openapi.Schema{"records": openapi.ArrayOf(ref("Position"))}, "records"),
		"InvalidRecords": object(openapi.Schema{
			"error":   openapi.ErrorSchema["properties"].(openapi.Schema)["error"],
			"invalid": openapi.ArrayOf(object(openapi.Schema{"index": integer, "line": integer, "message": str}, "index", "message")),
		}, "error", "invalid"),
		"TopicRecord": object(openapi.Schema{
			"partition": integer, "offset": integer, "key": str, "publishedAt": openapi.Time,
			"value":       described(openapi.AnyJSON, "The record as published: JSON, or a string when it is not JSON."),
			"traceparent": described(str, "The publisher's trace context, when one was recorded."),
		}, "partition", "offset", "key", "publishedAt", "value"),
	}

	qName := openapi.PathParam("name", "The queue.", str)
	topic := openapi.PathParam("topic", "The topic, e.g. pin.identity.users.v1.", str)
	group := openapi.PathParam("group", "The consumer group.", str)
	deadID := openapi.PathParam("id", "A dead letter's id.", str)
	list := []openapi.Parameter{
		openapi.Query("limit", "Rows per window, 1 to 1000; default 100.", false, openapi.Schema{"type": "integer", "minimum": 1, "maximum": 1000}),
		openapi.Query("q", "A search term: an id, an order or record key, or payload text (case-sensitive, in the first 4 KiB).",
			false, openapi.Schema{"type": "string", "maxLength": maxSearch}),
		openapi.Query("order", "oldest (the default) or newest.", false, openapi.Enum("oldest", "newest")),
		openapi.Query("cursor", `The "next" of the previous window.`, false, str),
	}
	params := func(ps ...[]openapi.Parameter) []openapi.Parameter {
		var out []openapi.Parameter
		for _, p := range ps {
			out = append(out, p...)
		}
		return out
	}
	one := func(ps ...openapi.Parameter) []openapi.Parameter { return ps }
	bulk := openapi.OptionalJSONBody(ref("BulkDeadLetters"))
	pauseBody := openapi.OptionalJSONBody(ref("PauseRequest"))
	nf, bad := []int{http.StatusNotFound}, []int{http.StatusNotFound, http.StatusBadRequest}
	ok := openapi.OK

	type route struct {
		method, path string
		op           openapi.AdminOp
	}
	for _, r := range []route{
		{"GET", "/queues", openapi.AdminOp{Tag: "queues", ID: "listQueues", Summary: "Every queue with its counts by state, oldest age and pause state",
			OK: ok("The queues.", object(openapi.Schema{"queues": openapi.ArrayOf(ref("Queue"))}, "queues"))}},
		{"GET", "/queues/{name}/messages", openapi.AdminOp{Tag: "queues", ID: "listQueueMessages",
			Summary: "A window of a queue's live messages (by state) or of its dead letters (state=dead)",
			Params: params(one(qName, openapi.Query("state", "ready, delayed, held, inflight or dead; none: every live message.", false,
				openapi.Enum("ready", "delayed", "held", "inflight", "dead"))), list),
			OK: ok("A window.", ref("QueueMessagePage")), Errs: bad}},
		{"GET", "/queues/{name}/messages/{id}/attempts", openapi.AdminOp{Tag: "queues", ID: "listQueueMessageAttempts",
			Summary: "The attempt history of a queue message, live, handled or dead (empty when nothing was recorded)",
			Params:  one(qName, openapi.PathParam("id", "The message's id.", str)),
			OK:      ok("Its attempts.", ref("Attempts")), Errs: bad}},
		{"POST", "/queues/{name}/purge", openapi.AdminOp{Tag: "queues", ID: "purgeQueue", Summary: "Delete a queue's live messages",
			Params: one(qName), OK: ok("How many were deleted.", ref("Purged")), Errs: nf}},
		{"GET", "/queues/{name}/dlq", openapi.AdminOp{Tag: "queues", ID: "listQueueDeadLetters", Summary: "A window of a queue's dead letters",
			Params: params(one(qName), list), OK: ok("A window.", ref("DeadLetterPage")), Errs: bad}},
		{"GET", "/queues/{name}/dlq/{id}", openapi.AdminOp{Tag: "queues", ID: "getQueueDeadLetter", Summary: "One dead letter with its attempts",
			Params: one(qName, deadID), OK: ok("The dead letter.", ref("DeadLetterDetail")), Errs: nf}},
		{"POST", "/queues/{name}/dlq/redrive", openapi.AdminOp{Tag: "queues", ID: "redriveQueueDeadLetters",
			Summary: "Send a queue's dead letters back to it: all, or those the body names", Params: one(qName), Body: bulk,
			OK: ok("How many were redriven.", ref("Redriven")), Errs: nf}},
		{"POST", "/queues/{name}/dlq/{id}/redrive", openapi.AdminOp{Tag: "queues", ID: "redriveQueueDeadLetter",
			Summary: "Send one dead letter back to its queue", Params: one(qName, deadID),
			OK: ok("Redriven.", ref("Redriven")), Errs: bad}},
		{"POST", "/queues/{name}/dlq/purge", openapi.AdminOp{Tag: "queues", ID: "purgeQueueDeadLetters",
			Summary: "Delete a queue's dead letters: all, or those the body names", Params: one(qName), Body: bulk,
			OK: ok("How many were deleted.", ref("Purged")), Errs: nf}},
		{"POST", "/queues/{name}/pause", openapi.AdminOp{Tag: "queues", ID: "pauseQueue",
			Summary: "Pause a queue's workers in every process (idempotent: a paused queue keeps who paused it first)",
			Params:  one(qName), Body: pauseBody, OK: ok("Its pause state.", ref("PauseState")), Errs: nf}},
		{"POST", "/queues/{name}/resume", openapi.AdminOp{Tag: "queues", ID: "resumeQueue", Summary: "Resume a queue's workers (idempotent)",
			Params: one(qName), OK: ok("Its pause state.", ref("PauseState")), Errs: nf}},

		{"GET", "/topics", openapi.AdminOp{Tag: "topics", ID: "listTopics", Summary: "Every topic with its partitions and groups' lag",
			OK: ok("The topics.", object(openapi.Schema{"topics": openapi.ArrayOf(ref("Topic"))}, "topics"))}},
		{"POST", "/topics/{topic}/messages", openapi.AdminOp{Tag: "topics", ID: "publishTopicRecords",
			Summary: "Publish one record (a JSON object) or a batch (a JSON array, or JSON lines) in one transaction",
			Description: "A record's key is ?key= when given, else its string aggregateId. A batch holds 1 to 1000 records, " +
				"all published or none: a batch with invalid records answers 400 invalid_records listing each; one with more " +
				"records answers 413 too_many_records.",
			Params: one(topic, openapi.Query("key", "The records' key; default: each record's string aggregateId.", false, str)),
			Body: &openapi.RequestBody{Required: true, Content: map[string]openapi.MediaType{
				"application/json": {Schema: openapi.Schema{"oneOf": []openapi.Schema{
					described(openapi.Schema{"type": "object"}, "One record."),
					described(openapi.Schema{"type": "array", "items": openapi.AnyJSON, "minItems": 1, "maxItems": MaxPublishBatch}, "A batch."),
				}}},
				NDJSONType: {Schema: described(str, "A batch: one JSON object a line; blank lines are skipped.")},
			}},
			OK: map[string]openapi.Response{
				"202": openapi.JSONResponse("Published: the record's position, or the batch's in its order.",
					openapi.Schema{"oneOf": []openapi.Schema{ref("Position"), ref("Positions")}}),
				"400": openapi.JSONResponse("Bad input (code bad_request), or a batch with invalid records (code "+
					"invalid_records, each listed; none was published).", openapi.Schema{"oneOf": []openapi.Schema{ref("Error"), ref("InvalidRecords")}}),
			},
			Errs: nf}},
		{"GET", "/topics/{topic}/messages", openapi.AdminOp{Tag: "topics", ID: "readTopicRecords", Summary: "Read a topic's retained log",
			Params: one(topic,
				openapi.Query("partition", "One partition; default every partition.", false, openapi.Schema{"type": "integer", "minimum": 0}),
				openapi.Query("fromOffset", "The first offset; default 0.", false, openapi.Schema{"type": "integer", "minimum": 0}),
				openapi.Query("limit", "At most this many, 1 to 1000; default 100.", false, openapi.Schema{"type": "integer", "minimum": 1, "maximum": 1000})),
			OK: ok("The records.", object(openapi.Schema{"messages": openapi.ArrayOf(ref("TopicRecord"))}, "messages")), Errs: bad}},
		{"GET", "/topics/{topic}/groups", openapi.AdminOp{Tag: "topics", ID: "listTopicGroups", Summary: "A topic's consumer groups: lag, members, created",
			Params: one(topic), OK: ok("The groups.", object(openapi.Schema{"groups": openapi.ArrayOf(ref("QueueGroupInfo"))}, "groups")), Errs: nf}},
		{"POST", "/topics/{topic}/groups", openapi.AdminOp{Tag: "topics", ID: "createTopicGroup",
			Summary: "Create a consumer group (idempotent: an existing one is answered as it stands)",
			Params:  one(topic), Body: openapi.JSONBody(ref("CreateGroup")),
			OK: map[string]openapi.Response{
				"201": openapi.JSONResponse("Created.", ref("QueueGroupInfo")),
				"200": openapi.JSONResponse("It existed; its offsets did not move.", ref("QueueGroupInfo")),
			}, Errs: nf}},
		{"DELETE", "/topics/{topic}/groups/{group}", openapi.AdminOp{Tag: "topics", ID: "deleteTopicGroup",
			Summary: "Delete a group no subscriber holds, with its offsets and dead letters",
			Params:  one(topic, group), OK: map[string]openapi.Response{"204": {Description: "Deleted."}},
			Errs: []int{http.StatusNotFound, http.StatusConflict}}},
		{"GET", "/topics/{topic}/groups/{group}/dlq", openapi.AdminOp{Tag: "topics", ID: "listGroupDeadLetters", Summary: "A window of a group's dead letters",
			Params: params(one(topic, group), list), OK: ok("A window.", ref("DeadLetterPage")), Errs: bad}},
		{"GET", "/topics/{topic}/groups/{group}/dlq/{id}", openapi.AdminOp{Tag: "topics", ID: "getGroupDeadLetter",
			Summary: "One of a group's dead letters with its attempts",
			Params:  one(topic, group, deadID), OK: ok("The dead letter.", ref("DeadLetterDetail")), Errs: nf}},
		{"POST", "/topics/{topic}/groups/{group}/dlq/redrive", openapi.AdminOp{Tag: "topics", ID: "redriveGroupDeadLetters",
			Summary: "Redeliver a group's dead letters to it: all, or those the body names", Params: one(topic, group), Body: bulk,
			OK: ok("How many were redriven.", ref("Redriven")), Errs: nf}},
		{"POST", "/topics/{topic}/groups/{group}/dlq/{id}/redrive", openapi.AdminOp{Tag: "topics", ID: "redriveGroupDeadLetter",
			Summary: "Redeliver one dead letter to its group", Params: one(topic, group, deadID),
			OK: ok("Redriven.", ref("Redriven")), Errs: bad}},
		{"POST", "/topics/{topic}/groups/{group}/dlq/purge", openapi.AdminOp{Tag: "topics", ID: "purgeGroupDeadLetters",
			Summary: "Delete a group's dead letters: all, or those the body names", Params: one(topic, group), Body: bulk,
			OK: ok("How many were deleted.", ref("Purged")), Errs: nf}},
		{"POST", "/topics/{topic}/groups/{group}/pause", openapi.AdminOp{Tag: "topics", ID: "pauseTopicGroup",
			Summary: "Pause a group's subscribers in every process (idempotent)", Params: one(topic, group), Body: pauseBody,
			OK: ok("Its pause state.", ref("PauseState")), Errs: nf}},
		{"POST", "/topics/{topic}/groups/{group}/resume", openapi.AdminOp{Tag: "topics", ID: "resumeTopicGroup",
			Summary: "Resume a group's subscribers (idempotent)", Params: one(topic, group),
			OK: ok("Its pause state.", ref("PauseState")), Errs: nf}},
		{"GET", "/topics/{topic}/groups/{group}/records/{partition}/{offset}/attempts", openapi.AdminOp{Tag: "topics", ID: "listRecordAttempts",
			Summary: "The attempt history of a record in a group (empty when nothing was recorded)",
			Params: one(topic, group,
				openapi.PathParam("partition", "The record's partition.", openapi.Schema{"type": "string", "pattern": "^[0-9]+$"}),
				openapi.PathParam("offset", "The record's offset.", openapi.Schema{"type": "string", "pattern": "^[0-9]+$"})),
			OK: ok("Its attempts.", ref("Attempts")), Errs: bad}},
	} {
		r.op.Add(p, r.method, r.path)
	}
	return p
}
