package queue

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gorilla/mux"
	"go.opentelemetry.io/otel/trace"

	"switchyard/httpjson"
	"switchyard/telemetry"
)

// AdminRoutes mounts the operator API on r, the /admin/api subrouter:
//
//	GET  /queues                                     queues with ready, delayed, held, in-flight, dead, oldest age
//	GET  /queues/{name}/messages?state=&limit=&q=&order=&cursor=   live messages (state ready|delayed|held|inflight)
//	                                                 or dead ones (state=dead); a list window (listParams)
//	POST /queues/{name}/purge                        delete the live messages
//	GET  /queues/{name}/dlq?limit=&q=&order=&cursor= the dead letters, a window at a time (listParams)
//	POST /queues/{name}/dlq/redrive                  redrive every dead letter, or those a body names (bulkBody)
//	POST /queues/{name}/dlq/{id}/redrive             redrive one
//	POST /queues/{name}/dlq/purge                    delete the dead letters, or those a body names (bulkBody)
//	POST /queues/{name}/pause                        pause the queue's workers everywhere: {"reason": "…"} (optional)
//	POST /queues/{name}/resume                       resume them (handlePause)
//	GET  /topics                                     topics, partitions, groups with lag
//	POST /topics/{topic}/messages?key=               publish a JSON object (key: ?key= or its "aggregateId"),
//	                                                 or a batch: a JSON array or application/x-ndjson (handlePublish)
//	GET  /topics/{topic}/messages?partition=&fromOffset=&limit=   read the retained log
//	GET  /topics/{topic}/groups                      the topic's groups: lag, active, created
//	POST /topics/{topic}/groups                      create a group: {"group": "…", "start": "earliest"|"latest"}
//	DELETE /topics/{topic}/groups/{group}            delete a group that no subscriber holds, with all it keeps
//	GET  /topics/{topic}/groups/{group}/dlq?limit=&q=&order=&cursor=   a group's dead letters (listParams)
//	POST /topics/{topic}/groups/{group}/dlq/redrive  redrive them all, or those a body names (bulkBody)
//	POST /topics/{topic}/groups/{group}/dlq/{id}/redrive
//	POST /topics/{topic}/groups/{group}/dlq/purge
//	POST /topics/{topic}/groups/{group}/pause        pause one group's subscribers everywhere: {"reason": "…"} (optional)
//	POST /topics/{topic}/groups/{group}/resume       resume them
func (a *Admin) AdminRoutes(r *mux.Router) {
	r.Handle("/queues", httpjson.HandlerFunc(a.handleQueues)).Methods(http.MethodGet)
	r.Handle("/queues/{name}/messages", httpjson.HandlerFunc(a.handleQueueMessages)).Methods(http.MethodGet)
	r.Handle("/queues/{name}/purge", httpjson.HandlerFunc(a.handlePurge)).Methods(http.MethodPost)
	r.Handle("/queues/{name}/dlq", httpjson.HandlerFunc(a.handleGroupDead)).Methods(http.MethodGet)
	r.Handle("/queues/{name}/dlq/redrive", httpjson.HandlerFunc(a.handleRedrive)).Methods(http.MethodPost)
	r.Handle("/queues/{name}/dlq/purge", httpjson.HandlerFunc(a.handlePurgeDead)).Methods(http.MethodPost)
	r.Handle("/queues/{name}/dlq/{id}/redrive", httpjson.HandlerFunc(a.handleRedrive)).Methods(http.MethodPost)
	r.Handle("/queues/{name}/pause", httpjson.HandlerFunc(a.handlePause)).Methods(http.MethodPost)
	r.Handle("/queues/{name}/resume", httpjson.HandlerFunc(a.handleResume)).Methods(http.MethodPost)
	r.Handle("/topics", httpjson.HandlerFunc(a.handleTopics)).Methods(http.MethodGet)
	r.Handle("/topics/{topic}/messages", httpjson.HandlerFunc(a.handlePublish)).Methods(http.MethodPost)
	r.Handle("/topics/{topic}/messages", httpjson.HandlerFunc(a.handleRead)).Methods(http.MethodGet)
	r.Handle("/topics/{topic}/groups", httpjson.HandlerFunc(a.handleGroups)).Methods(http.MethodGet)
	r.Handle("/topics/{topic}/groups", httpjson.HandlerFunc(a.handleCreateGroup)).Methods(http.MethodPost)
	r.Handle("/topics/{topic}/groups/{group}", httpjson.HandlerFunc(a.handleDeleteGroup)).Methods(http.MethodDelete)
	r.Handle("/topics/{topic}/groups/{group}/dlq", httpjson.HandlerFunc(a.handleGroupDead)).Methods(http.MethodGet)
	r.Handle("/topics/{topic}/groups/{group}/dlq/redrive", httpjson.HandlerFunc(a.handleRedrive)).Methods(http.MethodPost)
	r.Handle("/topics/{topic}/groups/{group}/dlq/purge", httpjson.HandlerFunc(a.handlePurgeDead)).Methods(http.MethodPost)
	r.Handle("/topics/{topic}/groups/{group}/dlq/{id}/redrive", httpjson.HandlerFunc(a.handleRedrive)).Methods(http.MethodPost)
	r.Handle("/topics/{topic}/groups/{group}/pause", httpjson.HandlerFunc(a.handlePause)).Methods(http.MethodPost)
	r.Handle("/topics/{topic}/groups/{group}/resume", httpjson.HandlerFunc(a.handleResume)).Methods(http.MethodPost)
	a.attemptRoutes(r)
}

type queueJSON struct {
	Name             string     `json:"name"`
	Ready            int64      `json:"ready"`
	Delayed          int64      `json:"delayed"`
	Held             int64      `json:"held"`
	InFlight         int64      `json:"inFlight"`
	Dead             int64      `json:"dead"`
	OldestAt         *time.Time `json:"oldestAt"`
	OldestAgeSeconds float64    `json:"oldestAgeSeconds"`
	pauseJSON
}

func (a *Admin) handleQueues(w http.ResponseWriter, r *http.Request) error {
	qs, err := a.queueStats(r.Context())
	if err != nil {
		return err
	}
	out := make([]queueJSON, 0, len(qs))
	for _, q := range qs {
		out = append(out, queueJSON{
			Name: q.Name, Ready: q.Ready, Delayed: q.Delayed, Held: q.Held, InFlight: q.InFlight, Dead: q.Dead,
			OldestAt: timePtr(q.OldestAt), OldestAgeSeconds: q.OldestAge.Seconds(), pauseJSON: pauseView(q.Pause),
		})
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"queues": out})
	return nil
}

type messageJSON struct {
	ID    string `json:"id"`
	State string `json:"state"`
	payloadJSON
	OrderKey  string     `json:"orderKey,omitempty"`
	Priority  int        `json:"priority"`
	Attempts  int        `json:"attempts"`
	LastError string     `json:"lastError,omitempty"`
	SentAt    time.Time  `json:"sentAt"`
	VisibleAt *time.Time `json:"visibleAt"`
}

type deadJSON struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Queue     string `json:"queue"`
	Group     string `json:"group,omitempty"`
	Partition *int   `json:"partition,omitempty"`
	Offset    *int64 `json:"offset,omitempty"`
	Key       string `json:"key,omitempty"`
	OrderKey  string `json:"orderKey,omitempty"`
	payloadJSON
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"lastError"`
	CreatedAt     time.Time `json:"createdAt"`
	FirstFailedAt time.Time `json:"firstFailedAt"`
	DeadAt        time.Time `json:"deadAt"`
	// Traceparent is the trace context the message or record carried,
	// which a redrive carries on.
	Traceparent string `json:"traceparent,omitempty"`
}

// payloadJSON shows a body as JSON when it is JSON, as text when it is
// UTF-8, else as base64.
type payloadJSON struct {
	Payload         json.RawMessage `json:"payload"`
	PayloadEncoding string          `json:"payloadEncoding"`
}

func payloadOf(b []byte) payloadJSON {
	if len(b) > 0 && json.Valid(b) {
		return payloadJSON{Payload: b, PayloadEncoding: "json"}
	}
	if utf8.Valid(b) {
		s, _ := json.Marshal(string(b))
		return payloadJSON{Payload: s, PayloadEncoding: "text"}
	}
	s, _ := json.Marshal(base64.StdEncoding.EncodeToString(b))
	return payloadJSON{Payload: s, PayloadEncoding: "base64"}
}

func (a *Admin) handleQueueMessages(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	name := mux.Vars(r)["name"]
	if err := a.queueExists(ctx, name); err != nil {
		return err
	}
	lp, err := listParamsOf(r)
	if err != nil {
		return err
	}
	state := r.URL.Query().Get("state")
	if state == "dead" {
		return a.writeDead(w, r, DeadFilter{Queue: name}, lp)
	}
	if checkState(MessageState(state)) != nil {
		return httpjson.BadRequest("state must be ready, delayed, held, inflight or dead, not %q", state)
	}
	f := MessageFilter{Queue: name, State: MessageState(state), Search: lp.search, Limit: lp.limit + 1, NewestFirst: lp.newest}
	if lp.cursor != "" && !lp.newest {
		return httpjson.BadRequest("a cursor pages the newest-first list of live messages: add order=newest")
	}
	f.Before = lp.cursor
	msgs, err := a.ListMessages(ctx, f)
	if errors.Is(err, ErrBadCursor) {
		return httpjson.BadRequest("cursor is not one this list gave out")
	}
	if err != nil {
		return err
	}
	c, err := a.CountMessages(ctx, f, "")
	if err != nil {
		return err
	}
	var next *string
	if lp.newest && len(msgs) > lp.limit {
		msgs = msgs[:lp.limit]
		next = &msgs[lp.limit-1].Cursor
	}
	msgs = msgs[:min(len(msgs), lp.limit)]
	out := make([]messageJSON, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, messageJSON{
			ID: string(m.ID), State: string(m.State), payloadJSON: payloadOf(m.Body), OrderKey: m.OrderKey,
			Priority: m.Priority, Attempts: m.Attempts, LastError: m.LastError, SentAt: m.SentAt, VisibleAt: timePtr(m.VisibleAt),
		})
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"messages": out, "total": c.Total, "next": next})
	return nil
}

// listParams are a list window's query parameters:
//
//	limit   rows per window, 1 to 1000 (default 100)
//	q       a search term: an id, an order or record key, or payload text
//	        (case-sensitive, in the first 4 KiB of each payload)
//	order   oldest (the default; for live messages, the order they are
//	        handled in) or newest
//	cursor  the "next" of the previous window, to continue the list
type listParams struct {
	limit  int
	search string
	newest bool
	cursor string
}

func listParamsOf(r *http.Request) (listParams, error) {
	var lp listParams
	var err error
	if lp.limit, err = intParam(r, "limit", 100); err != nil {
		return lp, err
	}
	q := r.URL.Query()
	lp.search, lp.cursor = q.Get("q"), q.Get("cursor")
	if len(lp.search) > maxSearch {
		return lp, httpjson.BadRequest("q is longer than %d bytes", maxSearch)
	}
	switch q.Get("order") {
	case "", "oldest":
	case "newest":
		lp.newest = true
	default:
		return lp, httpjson.BadRequest(`order must be "oldest" or "newest", not %q`, q.Get("order"))
	}
	return lp, nil
}

// writeDead answers a window of the dead letters f selects, with their
// total and the cursor of the next window (null at the end of the list).
func (a *Admin) writeDead(w http.ResponseWriter, r *http.Request, f DeadFilter, lp listParams) error {
	f.Search, f.NewestFirst, f.Limit = lp.search, lp.newest, lp.limit+1
	if lp.newest {
		f.Before = lp.cursor
	} else {
		f.After = lp.cursor
	}
	dead, err := a.ListDead(r.Context(), f)
	if errors.Is(err, ErrBadCursor) {
		return httpjson.BadRequest("cursor is not one this list gave out")
	}
	if err != nil {
		return err
	}
	c, err := a.CountDead(r.Context(), f, "")
	if err != nil {
		return err
	}
	var next *string
	if len(dead) > lp.limit {
		dead = dead[:lp.limit]
		next = &dead[lp.limit-1].Cursor
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"messages": deadView(dead), "total": c.Total, "next": next})
	return nil
}

func deadView(dead []DeadLetter) []deadJSON {
	out := make([]deadJSON, 0, len(dead))
	for _, d := range dead {
		out = append(out, deadJSON{
			ID: d.ID, State: "dead", Queue: d.Queue, Group: d.Group, Partition: d.Partition, Offset: d.Offset, Key: d.Key,
			OrderKey: d.OrderKey, payloadJSON: payloadOf(d.Body), Attempts: d.Attempts, LastError: d.LastError,
			CreatedAt: d.CreatedAt, FirstFailedAt: d.FirstFailedAt, DeadAt: d.DeadAt, Traceparent: d.Traceparent,
		})
	}
	return out
}

// deadFilterOf reads the dead-letter scope from the route: a queue, or a
// topic's group, and an optional id. It answers 404 for unknown ones.
func (a *Admin) deadFilterOf(r *http.Request) (DeadFilter, error) {
	v := mux.Vars(r)
	if topic, ok := v["topic"]; ok {
		f := DeadFilter{Queue: topic, Group: v["group"], ID: v["id"]}
		return f, a.groupExists(r.Context(), topic, f.Group)
	}
	f := DeadFilter{Queue: v["name"], ID: v["id"]}
	return f, a.queueExists(r.Context(), f.Queue)
}

// bulkBody is the optional body of a redrive or purge of dead letters:
// {"ids": [...]} acts on those (at most 1000, in one transaction), {"q":
// "..."} on every one the search term finds; no body acts on all.
type bulkBody struct {
	IDs    []string `json:"ids"`
	Search string   `json:"q"`
}

// bulkOf adds a redrive's or purge's body, if any, to f.
func bulkOf(r *http.Request, f DeadFilter) (DeadFilter, error) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return f, err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return f, nil
	}
	if f.ID != "" {
		return f, httpjson.BadRequest("a redrive of one dead letter takes no body")
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	var b bulkBody
	if err := httpjson.Decode(r, &b); err != nil {
		return f, err
	}
	switch {
	case b.IDs != nil && b.Search != "":
		return f, httpjson.BadRequest("give ids or q, not both")
	case b.IDs != nil && (len(b.IDs) == 0 || len(b.IDs) > MaxIDs):
		return f, httpjson.BadRequest("ids must name 1 to %d dead letters", MaxIDs)
	case len(b.Search) > maxSearch:
		return f, httpjson.BadRequest("q is longer than %d bytes", maxSearch)
	}
	f.IDs, f.Search = b.IDs, b.Search
	return f, nil
}

func (a *Admin) handleRedrive(w http.ResponseWriter, r *http.Request) error {
	f, err := a.deadFilterOf(r)
	if err != nil {
		return err
	}
	if f, err = bulkOf(r, f); err != nil {
		return err
	}
	n, err := a.Redrive(r.Context(), f)
	if err != nil {
		return notFound(err)
	}
	httpjson.Write(w, http.StatusOK, map[string]int{"redriven": n})
	return nil
}

func (a *Admin) handlePurgeDead(w http.ResponseWriter, r *http.Request) error {
	f, err := a.deadFilterOf(r)
	if err != nil {
		return err
	}
	if f, err = bulkOf(r, f); err != nil {
		return err
	}
	n, err := a.PurgeDead(r.Context(), f)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, map[string]int{"purged": n})
	return nil
}

func (a *Admin) handlePurge(w http.ResponseWriter, r *http.Request) error {
	name := mux.Vars(r)["name"]
	if err := a.queueExists(r.Context(), name); err != nil {
		return err
	}
	n, err := a.Purge(r.Context(), name)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, map[string]int{"purged": n})
	return nil
}

func (a *Admin) handleGroupDead(w http.ResponseWriter, r *http.Request) error {
	f, err := a.deadFilterOf(r)
	if err != nil {
		return err
	}
	lp, err := listParamsOf(r)
	if err != nil {
		return err
	}
	return a.writeDead(w, r, f, lp)
}

type topicJSON struct {
	Name             string          `json:"name"`
	RetentionSeconds int64           `json:"retentionSeconds"`
	Partitions       []partitionJSON `json:"partitions"`
	Groups           []groupJSON     `json:"groups"`
}

type partitionJSON struct {
	Partition int   `json:"partition"`
	Start     int64 `json:"startOffset"`
	End       int64 `json:"endOffset"`
}

type groupJSON struct {
	Group            string               `json:"group"`
	Lag              int64                `json:"lag"`
	Retrying         int64                `json:"retrying"`
	Dead             int64                `json:"dead"`
	OldestAgeSeconds float64              `json:"oldestAgeSeconds"`
	Members          []string             `json:"members"`
	Partitions       []groupPartitionJSON `json:"partitions"`
	pauseJSON
}

type groupPartitionJSON struct {
	Partition        int        `json:"partition"`
	Committed        int64      `json:"committedOffset"`
	End              int64      `json:"endOffset"`
	Lag              int64      `json:"lag"`
	OldestAt         *time.Time `json:"oldestAt"`
	OldestAgeSeconds float64    `json:"oldestAgeSeconds"`
	Owner            string     `json:"owner"`
	LeaseExpiresAt   *time.Time `json:"leaseExpiresAt"`
}

func (a *Admin) handleTopics(w http.ResponseWriter, r *http.Request) error {
	ts, err := a.topicStats(r.Context())
	if err != nil {
		return err
	}
	out := make([]topicJSON, 0, len(ts))
	for _, t := range ts {
		tj := topicJSON{Name: t.Name, RetentionSeconds: int64(t.Retention / time.Second), Partitions: []partitionJSON{}, Groups: []groupJSON{}}
		for _, p := range t.Partitions {
			tj.Partitions = append(tj.Partitions, partitionJSON(p))
		}
		for _, g := range t.Groups {
			tj.Groups = append(tj.Groups, groupJSONOf(g))
		}
		out = append(out, tj)
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"topics": out})
	return nil
}

func groupJSONOf(g GroupStats) groupJSON {
	gj := groupJSON{Group: g.Group, Lag: g.Lag, Retrying: g.Retrying, Dead: g.Dead, OldestAgeSeconds: g.OldestAge.Seconds(),
		Members: append([]string{}, g.Members...), Partitions: []groupPartitionJSON{}, pauseJSON: pauseView(g.Pause)}
	for _, p := range g.Partitions {
		gj.Partitions = append(gj.Partitions, groupPartitionJSON{
			Partition: p.Partition, Committed: p.Committed, End: p.End, Lag: p.Lag,
			OldestAt: timePtr(p.OldestAt), OldestAgeSeconds: p.OldestAge.Seconds(),
			Owner: p.Owner, LeaseExpiresAt: timePtr(p.LeaseExpiresAt),
		})
	}
	return gj
}

// groupInfoJSON is a group as the groups routes show it.
type groupInfoJSON struct {
	groupJSON
	CreatedAt time.Time `json:"createdAt"`
	Active    bool      `json:"active"`
}

func groupInfoView(g GroupInfo) groupInfoJSON {
	return groupInfoJSON{groupJSON: groupJSONOf(g.GroupStats), CreatedAt: g.CreatedAt, Active: g.Active}
}

func (a *Admin) handleGroups(w http.ResponseWriter, r *http.Request) error {
	ti, err := loadTopic(r.Context(), a.db, mux.Vars(r)["topic"])
	if err != nil {
		return notFound(err)
	}
	groups, err := listGroups(r.Context(), a.db, ti.name, ti.partitions)
	if err != nil {
		return err
	}
	out := make([]groupInfoJSON, 0, len(groups))
	for _, g := range groups {
		out = append(out, groupInfoView(g))
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"groups": out})
	return nil
}

// handleCreateGroup creates a group: 201 with the group when it is new, 200
// with the group as it stands when it existed (its offsets unmoved, whatever
// start says), so that a client may repeat the request safely.
func (a *Admin) handleCreateGroup(w http.ResponseWriter, r *http.Request) error {
	ti, err := loadTopic(r.Context(), a.db, mux.Vars(r)["topic"])
	if err != nil {
		return notFound(err)
	}
	var body struct {
		Group string `json:"group"`
		Start string `json:"start"`
	}
	if err := httpjson.Decode(r, &body); err != nil {
		return err
	}
	if err := CheckGroupName(body.Group); err != nil {
		return httpjson.BadRequest("group: %s", strings.TrimPrefix(err.Error(), "queue: "))
	}
	var start StartPosition
	switch body.Start {
	case "", "earliest":
		start = StartEarliest
	case "latest":
		start = StartLatest
	default:
		return httpjson.BadRequest(`start must be "earliest" or "latest", not %q`, body.Start)
	}
	created, err := createGroup(r.Context(), a.db, ti.name, ti.partitions, body.Group, start)
	if err != nil {
		return err
	}
	g, err := groupInfo(r.Context(), a.db, ti.name, ti.partitions, body.Group)
	if err != nil {
		return notFound(err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		a.log.Info("queue group created", slog.String("topic", ti.name), slog.String("group", body.Group),
			slog.String("start", cmp.Or(body.Start, "earliest")), slog.String("outcome", "created"))
	}
	httpjson.Write(w, status, groupInfoView(g))
	return nil
}

// handleDeleteGroup deletes a group: 204, 404 when the topic or the group is
// unknown, 409 group_active while a subscriber holds it.
func (a *Admin) handleDeleteGroup(w http.ResponseWriter, r *http.Request) error {
	v := mux.Vars(r)
	ti, err := loadTopic(r.Context(), a.db, v["topic"])
	if err != nil {
		return notFound(err)
	}
	group := v["group"]
	switch err := deleteGroup(r.Context(), a.db, ti.name, ti.partitions, group); {
	case errors.Is(err, ErrGroupActive):
		return httpjson.Errorf(http.StatusConflict, "group_active",
			"consumer group %q of topic %q has a live subscriber; stop it in every process first", group, ti.name)
	case err != nil:
		return notFound(err)
	}
	a.log.Info("queue group deleted", slog.String("topic", ti.name), slog.String("group", group), slog.String("outcome", "deleted"))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// MaxPublishBatch is the most records one batch publish takes; a batch with
// more is refused whole with a 413 "too_many_records". The server's body
// limit (1 MiB by default) caps its bytes.
const MaxPublishBatch = 1000

// NDJSONType is the media type of a batch of records as JSON lines.
const NDJSONType = "application/x-ndjson"

// handlePublish publishes one record or a batch. A body sent as
// application/json that is an object is one record: 202 {"partition",
// "offset"}. One that is an array, or a body sent as application/x-ndjson
// (one object a line, blank lines skipped), is a batch of 1 to
// MaxPublishBatch records published in one transaction, all or none: 202
// {"records":[{"partition","offset"},…]} in the body's order, or, when any
// record is not a JSON object or has no key, 400 "invalid_records" listing
// each bad one by its index (and line) with nothing published. A record's
// key is ?key= when given, else its string "aggregateId"; the records of a
// key keep the body's order.
//
// Every record carries the request's trace context (publishContext): the
// server span's, which continues a caller's traceparent header.
func (a *Admin) handlePublish(w http.ResponseWriter, r *http.Request) error {
	r = r.WithContext(publishContext(r))
	topic := mux.Vars(r)["topic"]
	ti, err := loadTopic(r.Context(), a.db, topic)
	if err != nil {
		return notFound(err)
	}
	ndjson := isNDJSON(r)
	if !ndjson {
		if err := httpjson.RequireJSON(r); err != nil {
			return err
		}
	}
	body, err := io.ReadAll(r.Body)
	switch {
	case errors.As(err, new(*http.MaxBytesError)):
		return err
	case httpjson.IsTimeout(err):
		return httpjson.RequestTimeout()
	case err != nil:
		return httpjson.BadRequest("read body: %v", err)
	}
	b := batch{queryKey: r.URL.Query().Get("key")}
	switch {
	case ndjson:
		err = b.addLines(body)
	case bytes.HasPrefix(bytes.TrimLeft(body, jsonSpace), []byte("[")):
		err = b.addArray(body)
	default:
		return a.publishOne(w, r, topic, b.queryKey, body)
	}
	if err != nil {
		return err
	}
	if len(b.recs) == 0 {
		return httpjson.BadRequest("the batch has no records")
	}
	if len(b.invalid) > 0 {
		var out invalidRecordsJSON
		out.Error.Code = "invalid_records"
		out.Error.Message = fmt.Sprintf("%d of %d records are invalid; none was published", len(b.invalid), len(b.recs))
		out.Invalid = b.invalid
		httpjson.Write(w, http.StatusBadRequest, out)
		return nil
	}
	pos, err := publishBatch(r.Context(), a.db, topic, ti.partitions, b.recs)
	if err != nil {
		return notFound(err)
	}
	httpjson.Write(w, http.StatusAccepted, map[string]any{"records": pos})
	return nil
}

// publishContext is the context a publish's records take their traceparent
// from: the request's, which carries the server span when the routes are
// mounted under the web server's middleware (itself a child of the caller's
// traceparent header); routes mounted bare take the caller's header as it
// is, so that a record never loses the trace it was sent in.
func publishContext(r *http.Request) context.Context {
	if trace.SpanContextFromContext(r.Context()).IsValid() {
		return r.Context()
	}
	return telemetry.FromRequest(r)
}

// publishOne is the single-record publish: body is one JSON object.
func (a *Admin) publishOne(w http.ResponseWriter, r *http.Request, topic, key string, body []byte) error {
	r.Body = io.NopCloser(bytes.NewReader(body))
	var raw json.RawMessage
	if err := httpjson.Decode(r, &raw); err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) || json.Unmarshal(raw, &fields) != nil {
		return httpjson.BadRequest("the body must be a JSON object")
	}
	if key == "" {
		key = aggregateID(fields)
	}
	if key == "" {
		return httpjson.BadRequest(`a key is required: pass ?key= or a non-empty string "aggregateId" in the body`)
	}
	pos, err := a.Publish(r.Context(), topic, key, raw)
	if err != nil {
		return notFound(err)
	}
	httpjson.Write(w, http.StatusAccepted, pos)
	return nil
}

// isNDJSON reports whether the request's one Content-Type is
// application/x-ndjson.
func isNDJSON(r *http.Request) bool {
	values := r.Header.Values("Content-Type")
	if len(values) != 1 {
		return false
	}
	mt, _, err := mime.ParseMediaType(values[0])
	return err == nil && mt == NDJSONType
}

// aggregateID is the string "aggregateId" of a record's fields, or "".
func aggregateID(fields map[string]json.RawMessage) string {
	var id string
	if raw, ok := fields["aggregateId"]; ok {
		_ = json.Unmarshal(raw, &id)
	}
	return id
}

// invalidRecordJSON is a record of a batch that cannot be published: its
// index among the batch's records and, in a JSON-lines body, its line.
type invalidRecordJSON struct {
	Index   int    `json:"index"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// invalidRecordsJSON is the 400 of a batch with invalid records: the usual
// error body, and the records.
type invalidRecordsJSON struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Invalid []invalidRecordJSON `json:"invalid"`
}

// batch collects a batch's records in the body's order, checking each.
type batch struct {
	queryKey string
	recs     []KeyValue // an invalid record's is empty, keeping the indexes
	invalid  []invalidRecordJSON
}

func tooManyRecords() error {
	return httpjson.Errorf(http.StatusRequestEntityTooLarge, "too_many_records",
		"a batch holds at most %d records; split it into several requests", MaxPublishBatch)
}

// recordOptions make jsontext accept what encoding/json's Unmarshal does
// (the single-record publish's parser): repeated names, the last one
// counting, and invalid UTF-8.
var recordOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// jsonSpace is JSON's white space (RFC 8259), which alone may surround a
// value.
const jsonSpace = " \t\r\n"

// addArray adds the elements of a JSON array, each read once: its bytes
// as sent become the record's value.
func (b *batch) addArray(body []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(body), recordOptions...)
	if _, err := dec.ReadToken(); err != nil { // the '['
		return httpjson.BadRequest("malformed JSON: %v", err)
	}
	for dec.PeekKind() != ']' {
		if len(b.recs) == MaxPublishBatch {
			return tooManyRecords()
		}
		start := dec.InputOffset()
		key, object, err := readRecord(dec)
		if err != nil {
			return httpjson.BadRequest("malformed JSON at record %d: %v", len(b.recs), err)
		}
		b.add(bytes.TrimLeft(body[start:dec.InputOffset()], ","+jsonSpace), key, object, 0)
	}
	if _, err := dec.ReadToken(); err != nil { // the ']'
		return httpjson.BadRequest("malformed JSON: %v", err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return httpjson.BadRequest("malformed JSON: more than one value in the body")
	}
	return nil
}

// addLines adds the non-blank lines of a JSON-lines body.
func (b *batch) addLines(body []byte) error {
	var (
		dec jsontext.Decoder
		in  bytes.Reader
	)
	for n := 1; len(body) > 0; n++ {
		line, rest, _ := bytes.Cut(body, []byte("\n"))
		body = rest
		if line = bytes.Trim(line, jsonSpace); len(line) == 0 {
			continue
		}
		if len(b.recs) == MaxPublishBatch {
			return tooManyRecords()
		}
		in.Reset(line)
		dec.Reset(&in, recordOptions...)
		key, object, err := readRecord(&dec)
		if err == nil {
			if _, err = dec.ReadToken(); errors.Is(err, io.EOF) {
				err = nil
			} else if err == nil {
				err = errors.New("more than one value on the line")
			}
		}
		if err != nil {
			b.invalid = append(b.invalid, invalidRecordJSON{Index: len(b.recs), Line: n, Message: "malformed JSON: " + err.Error()})
			b.recs = append(b.recs, KeyValue{})
			continue
		}
		b.add(line, key, object, n)
	}
	return nil
}

// add keeps a record read by readRecord (line is its line, 0 in a JSON
// array), or its fault.
func (b *batch) add(raw []byte, aggregateID string, object bool, line int) {
	key := cmp.Or(b.queryKey, aggregateID)
	msg := ""
	switch {
	case !object:
		msg = "the record must be a JSON object"
	case key == "":
		msg = `a key is required: pass ?key= or a non-empty string "aggregateId" in the record`
	}
	if msg != "" {
		b.invalid = append(b.invalid, invalidRecordJSON{Index: len(b.recs), Line: line, Message: msg})
		b.recs = append(b.recs, KeyValue{})
		return
	}
	b.recs = append(b.recs, KeyValue{Key: key, Value: raw})
}

// aggregateIDName is the member a record's key is read from, as it is
// usually written.
var aggregateIDName = []byte(`"aggregateId"`)

// readRecord reads one JSON value from dec, checking its syntax: whether
// it is an object and, if so, its "aggregateId" as the single-record
// publish reads it (the last such member, when a string, decoded by
// encoding/json), else "". It is one pass, with no map of the members.
func readRecord(dec *jsontext.Decoder) (aggregateID string, object bool, err error) {
	if dec.PeekKind() != '{' {
		_, err := dec.ReadValue() // a value of another kind, or the error
		return "", false, err
	}
	if _, err := dec.ReadToken(); err != nil {
		return "", false, err
	}
	var id []byte
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return "", false, err
		}
		match := bytes.Equal(name, aggregateIDName)
		if !match && bytes.IndexByte(name, '\\') >= 0 { // an escaped name
			unquoted, err := jsontext.AppendUnquote(nil, name)
			match = err == nil && string(unquoted) == "aggregateId"
		}
		v, err := dec.ReadValue()
		if err != nil {
			return "", false, err
		}
		if match {
			id = append(id[:0], v...)
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return "", false, err
	}
	if len(id) > 0 && id[0] == '"' {
		_ = json.Unmarshal(id, &aggregateID)
	}
	return aggregateID, true, nil
}

type recordJSON struct {
	Partition   int             `json:"partition"`
	Offset      int64           `json:"offset"`
	Key         string          `json:"key"`
	PublishedAt time.Time       `json:"publishedAt"`
	Value       json.RawMessage `json:"value"`
	// Traceparent is the publisher's trace context, when one was recorded.
	Traceparent string `json:"traceparent,omitempty"`
}

func (a *Admin) handleRead(w http.ResponseWriter, r *http.Request) error {
	topic := mux.Vars(r)["topic"]
	ti, err := loadTopic(r.Context(), a.db, topic)
	if err != nil {
		return notFound(err)
	}
	var f ReadFilter
	if s := r.URL.Query().Get("partition"); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil || p < 0 || p >= ti.partitions {
			return httpjson.BadRequest("partition must be an integer from 0 to %d", ti.partitions-1)
		}
		f.Partition = &p
	}
	if s := r.URL.Query().Get("fromOffset"); s != "" {
		off, err := strconv.ParseInt(s, 10, 64)
		if err != nil || off < 0 {
			return httpjson.BadRequest("fromOffset must be a non-negative integer")
		}
		f.FromOffset = off
	}
	if f.Limit, err = intParam(r, "limit", 100); err != nil {
		return err
	}
	recs, err := a.Read(r.Context(), topic, f)
	if err != nil {
		return notFound(err)
	}
	out := make([]recordJSON, 0, len(recs))
	for _, rec := range recs {
		out = append(out, recordJSON{Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, PublishedAt: rec.PublishedAt,
			Value: payloadOf(rec.Value).Payload, Traceparent: rec.Traceparent})
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"messages": out})
	return nil
}

// pauseJSON is a queue's or a group's pause state: pausedAt null, pausedBy
// and pauseReason "" while it runs.
type pauseJSON struct {
	Paused      bool       `json:"paused"`
	PausedAt    *time.Time `json:"pausedAt"`
	PausedBy    string     `json:"pausedBy"`
	PauseReason string     `json:"pauseReason"`
}

func pauseView(p PauseState) pauseJSON {
	return pauseJSON{Paused: p.Paused, PausedAt: timePtr(p.At), PausedBy: p.By, PauseReason: p.Reason}
}

// pauseAnswerJSON is what the pause and resume routes answer: what they
// applied to and its state now.
type pauseAnswerJSON struct {
	Queue string `json:"queue,omitempty"`
	Topic string `json:"topic,omitempty"`
	Group string `json:"group,omitempty"`
	pauseJSON
}

// pauseTargetOf reads what a pause or resume route names: a queue, or a
// topic's group.
func pauseTargetOf(r *http.Request) PauseTarget {
	v := mux.Vars(r)
	if topic, ok := v["topic"]; ok {
		return PauseTarget{Queue: topic, Group: v["group"]}
	}
	return PauseTarget{Queue: v["name"]}
}

func pauseAnswer(t PauseTarget, st PauseState) pauseAnswerJSON {
	if t.Group != "" {
		return pauseAnswerJSON{Topic: t.Queue, Group: t.Group, pauseJSON: pauseView(st)}
	}
	return pauseAnswerJSON{Queue: t.Queue, pauseJSON: pauseView(st)}
}

// APIActor is who the admin API records as having paused something when
// the request carries the admin Bearer token; a request the console's
// session let through is recorded as ConsoleActor. The token is shared by
// every operator, so these name the surface, not a person.
const (
	APIActor     = "admin API"
	ConsoleActor = "console"
)

// handlePause pauses a queue or a group: 200 with its state, the same when
// it was paused already (who paused it first, and when); 404 for an unknown
// one. The body is optional: {"reason": "…"}.
func (a *Admin) handlePause(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Reason string `json:"reason"`
	}
	if r.ContentLength != 0 {
		if err := httpjson.Decode(r, &body); err != nil {
			return err
		}
	}
	if len(body.Reason) > 500 {
		return httpjson.BadRequest("reason: at most 500 bytes")
	}
	by := ConsoleActor
	if _, ok := bearerToken(r); ok {
		by = APIActor
	}
	t := pauseTargetOf(r)
	st, err := a.Pause(r.Context(), t, PauseOpts{By: by, Reason: strings.TrimSpace(body.Reason)})
	if err != nil {
		return notFound(err)
	}
	httpjson.Write(w, http.StatusOK, pauseAnswer(t, st))
	return nil
}

// handleResume resumes a queue or a group: 200 with its state (running),
// also when it was running; 404 for an unknown one.
func (a *Admin) handleResume(w http.ResponseWriter, r *http.Request) error {
	t := pauseTargetOf(r)
	st, err := a.Resume(r.Context(), t)
	if err != nil {
		return notFound(err)
	}
	httpjson.Write(w, http.StatusOK, pauseAnswer(t, st))
	return nil
}

// bearerToken reports whether r carries an "Authorization: Bearer" header
// (the admin API's authentication has already checked it).
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return strings.TrimSpace(h[len(prefix):]), true
}

// queueExists answers 404 for a queue the database does not know (knownQueue).
func (a *Admin) queueExists(ctx context.Context, name string) error {
	ok, err := a.knownQueue(ctx, name)
	if err == nil && !ok {
		return httpjson.NotFound("no queue %q", name)
	}
	return err
}

// knownQueue reports whether a queue is declared in this process or has
// messages, dead letters or a pause.
func (a *Admin) knownQueue(ctx context.Context, name string) (bool, error) {
	for _, n := range hubFor(a.db).declaredQueues() {
		if n == name {
			return true, nil
		}
	}
	var one int
	err := a.db.Read.QueryRowContext(ctx, `
		select 1 where exists (select 1 from goqite where queue in (?, ?))
		or exists (select 1 from queue_dead where queue = ? and grp = '')
		or exists (select 1 from queue_pauses where queue = ? and grp = '')`, name, heldQueue(name), name, name).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (a *Admin) groupExists(ctx context.Context, topic, group string) error {
	var one int
	err := a.db.Read.QueryRowContext(ctx, `select 1 from queue_groups where topic = ? and grp = ?`, topic, group).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return httpjson.NotFound("no consumer group %q on topic %q", group, topic)
	}
	return err
}

func notFound(err error) error {
	if errors.Is(err, ErrNotFound) {
		return httpjson.NotFound("%v", err)
	}
	return err
}

func intParam(r *http.Request, name string, def int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > 1000 {
		return 0, httpjson.BadRequest("%s must be an integer from 1 to 1000", name)
	}
	return n, nil
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
