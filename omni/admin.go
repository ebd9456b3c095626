package omni

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"switchyard/httpjson"
	"switchyard/store"
)

// AdminOpts configure NewAdmin. Zero values get defaults.
type AdminOpts struct {
	DB *store.DB
	// AutoAckText and DisableAutoAck are the chat role's defaults for the
	// acknowledgement rule (see ChatOpts), shown until an operator sets it.
	AutoAckText    string
	DisableAutoAck bool
	// Logger gets operator actions; nil discards.
	Logger *slog.Logger
}

// Admin is the operators' side of the chat platform: threads, messages, the
// reply that becomes an outgoing command on sender.flow, and the chat rules.
// It runs in every process that serves the admin API, whatever its roles,
// and never calls a provider.
type Admin struct {
	db     *store.DB
	log    *slog.Logger
	domain *chatDomain
}

// NewAdmin returns the admin side on opts.DB. A nil DB panics.
func NewAdmin(opts AdminOpts) *Admin {
	if opts.DB == nil {
		panic("omni: NewAdmin needs a DB")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Admin{
		db:     opts.DB,
		log:    opts.Logger.With(slog.String("component", "omni-admin")),
		domain: newChatDomain(opts.DB, autoAckDefault(opts.AutoAckText, opts.DisableAutoAck)),
	}
}

// MaxReplyRunes is the longest reply an operator may send (Telegram's limit
// for one message).
const MaxReplyRunes = 4096

// AdminRoutes registers the operator routes on r, the /admin/api subrouter:
//
//	GET  /omni/threads                  threads, latest activity first
//	GET  /omni/threads/{id}/messages    a thread's messages in thread order
//	POST /omni/threads/{id}/messages    an operator's reply {"text"} → 202
//	POST /omni/threads/{id}/close       close a thread (a new message reopens it)
//	POST /omni/threads/{id}/read        clear a thread's unread count
//	GET  /omni/messages/{id}            one message with its delivery status
//	GET  /omni/rules/auto-ack           the acknowledgement rule
//	PUT  /omni/rules/auto-ack           change it {"enabled","text"}
func (a *Admin) AdminRoutes(r *mux.Router) {
	r.Handle("/omni/threads", httpjson.HandlerFunc(a.listThreads)).Methods(http.MethodGet)
	r.Handle("/omni/threads/{id:[0-9]+}/messages", httpjson.HandlerFunc(a.listMessages)).Methods(http.MethodGet)
	r.Handle("/omni/threads/{id:[0-9]+}/messages", httpjson.HandlerFunc(a.reply)).Methods(http.MethodPost)
	r.Handle("/omni/threads/{id:[0-9]+}/close", httpjson.HandlerFunc(a.closeThread)).Methods(http.MethodPost)
	r.Handle("/omni/threads/{id:[0-9]+}/read", httpjson.HandlerFunc(a.readThread)).Methods(http.MethodPost)
	r.Handle("/omni/messages/{id:[0-9]+}", httpjson.HandlerFunc(a.getMessage)).Methods(http.MethodGet)
	r.Handle("/omni/rules/auto-ack", httpjson.HandlerFunc(a.getAutoAck)).Methods(http.MethodGet)
	r.Handle("/omni/rules/auto-ack", httpjson.HandlerFunc(a.putAutoAck)).Methods(http.MethodPut)
}

// ThreadFilter narrows ListThreads.
type ThreadFilter struct {
	// State is open, closed, or empty for both.
	State ThreadState
	// Search keeps the threads a term finds (threads.go says how).
	Search string
	// Before keeps the threads after this key (Thread.Key) in the list's
	// order, latest activity first: an older window. After keeps those
	// before it, listed nearest the key first: a newer window.
	Before, After string
	// Limit caps the result (default 100, at most 500).
	Limit int
}

const (
	// threadColumns are a thread's with its contact's, as scanThread reads them.
	threadColumns = `
		t.id, t.channel, t.business_connection_id, t.bot_id, t.chat_id, t.state, t.unread, t.last_message_at,
		c.id, c.provider, c.provider_user_id, c.business_connection_id, c.name, c.username, c.reachable,
		coalesce(c.unreachable_reason, '')`
	threadFrom = ` from omni_threads t join omni_contacts c on c.id = t.contact_id`
)

// ListThreads returns a window of threads, the latest activity first
// (threads.go).
func (a *Admin) ListThreads(ctx context.Context, f ThreadFilter) ([]Thread, error) {
	q, args, err := f.listSQL()
	if err != nil {
		return nil, err
	}
	rows, err := a.db.Read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	defer rows.Close()
	threads := []Thread{}
	for rows.Next() {
		t, err := scanThread(rows)
		if err != nil {
			return nil, fmt.Errorf("list threads: %w", err)
		}
		threads = append(threads, t)
	}
	return threads, rows.Err()
}

// scanThread reads a thread with its contact, in listThreadsQuery's columns.
func scanThread(s scanner) (Thread, error) {
	var (
		t         Thread
		last      store.Timestamp
		reachable int
	)
	if err := s.Scan(&t.ID, &t.Channel, &t.BusinessConnectionID, &t.BotID, &t.ChatID, &t.State, &t.Unread, &last,
		&t.Contact.ID, &t.Contact.Provider, &t.Contact.ProviderUserID, &t.Contact.BusinessConnectionID,
		&t.Contact.Name, &t.Contact.Username, &reachable, &t.Contact.UnreachableReason); err != nil {
		return Thread{}, err
	}
	t.LastMessageAt, t.Contact.Reachable = last.Ptr(), reachable == 1
	return t, nil
}

// MessageFilter narrows ListMessages.
type MessageFilter struct {
	// AfterSeq returns only messages after this position in the thread, in
	// thread order.
	AfterSeq int64
	// Newest lists the thread from its latest message back (seq
	// descending), below BeforeSeq when it is set: the newest window of a
	// long thread, and the older ones.
	Newest    bool
	BeforeSeq int64
	// Limit caps the result (default 500, at most 1000).
	Limit int
}

const (
	messageColumns = `
		id, thread_id, seq, direction, origin, kind, text, status, provider_message_id, attempts,
		next_attempt_at, coalesce(failure_reason, ''), edited_at, deleted_at, sent_at, created_at`
	threadExistsQuery = `select count(*) from omni_threads where id = ?`
	listMessagesQuery = `select ` + messageColumns + ` from omni_messages where thread_id = ? and seq > ? order by seq limit ?`
	// newestMessagesQuery walks the (thread_id, seq) key backwards.
	newestMessagesQuery = `select ` + messageColumns + ` from omni_messages where thread_id = ? and seq > ? and seq < ?
		order by seq desc limit ?`
	countMessagesQuery = `select count(*) from omni_messages where thread_id = ? and seq > ? and seq < ?`
	getMessageQuery    = `select ` + messageColumns + ` from omni_messages where id = ?`
)

// ListMessages returns a thread's messages in thread order, or, with
// Newest, latest first.
func (a *Admin) ListMessages(ctx context.Context, thread ThreadID, f MessageFilter) ([]OmniMessage, error) {
	if f.Limit <= 0 {
		f.Limit = 500
	}
	f.Limit = min(f.Limit, 1000)
	var n int
	if err := a.db.Read.QueryRowContext(ctx, threadExistsQuery, int64(thread)).Scan(&n); err != nil {
		return nil, fmt.Errorf("find thread: %w", err)
	}
	if n == 0 {
		return nil, ErrThreadNotFound
	}
	q, args := listMessagesQuery, []any{int64(thread), f.AfterSeq, f.Limit}
	if f.Newest || f.BeforeSeq > 0 {
		q, args = newestMessagesQuery, []any{int64(thread), f.AfterSeq, seqBelow(f.BeforeSeq), f.Limit}
	}
	rows, err := a.db.Read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list messages: %w", err)
	}
	defer rows.Close()
	msgs := []OmniMessage{}
	for rows.Next() {
		m, err := scanMessage(rows)
		if err != nil {
			return nil, fmt.Errorf("list messages: %w", err)
		}
		msgs = append(msgs, m)
	}
	return msgs, rows.Err()
}

// seqBelow is the bound of a BeforeSeq: none when it is zero.
func seqBelow(before int64) int64 {
	if before <= 0 {
		return math.MaxInt64
	}
	return before
}

// CountMessages counts a thread's messages between f's AfterSeq and
// BeforeSeq (all of them when both are zero), from the (thread_id, seq) key.
func (a *Admin) CountMessages(ctx context.Context, thread ThreadID, f MessageFilter) (int64, error) {
	var n int64
	if err := a.db.Read.QueryRowContext(ctx, countMessagesQuery, int64(thread), f.AfterSeq, seqBelow(f.BeforeSeq)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count messages: %w", err)
	}
	return n, nil
}

// Message returns one message.
func (a *Admin) Message(ctx context.Context, id MessageID) (OmniMessage, error) {
	m, err := scanMessage(a.db.Read.QueryRowContext(ctx, getMessageQuery, int64(id)))
	if errors.Is(err, sql.ErrNoRows) {
		return OmniMessage{}, ErrMessageNotFound
	}
	if err != nil {
		return OmniMessage{}, fmt.Errorf("read message %d: %w", id, err)
	}
	return m, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanMessage(s scanner) (OmniMessage, error) {
	var (
		m                                OmniMessage
		providerID                       sql.NullString
		next, edited, deleted, sent, cre store.Timestamp
	)
	err := s.Scan(&m.ID, &m.ThreadID, &m.Seq, &m.Direction, &m.Origin, &m.Kind, &m.Text, &m.Status, &providerID,
		&m.Attempts, &next, &m.FailureReason, &edited, &deleted, &sent, &cre)
	if err != nil {
		return OmniMessage{}, err
	}
	if providerID.Valid {
		m.ProviderMessageID = &providerID.String
	}
	m.NextAttemptAt, m.EditedAt, m.DeletedAt, m.SentAt, m.CreatedAt = next.Ptr(), edited.Ptr(), deleted.Ptr(), sent.Ptr(), cre.Time
	return m, nil
}

// Reply queues an operator's reply in a thread: the message, in status
// queued, and its send command on sender.flow commit together.
func (a *Admin) Reply(ctx context.Context, thread ThreadID, text string) (OmniMessage, error) {
	var id MessageID
	err := a.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		id, err = a.domain.queueOutgoingTx(ctx, tx, thread, OriginOperator, text)
		return err
	})
	if err != nil {
		return OmniMessage{}, err
	}
	a.log.Info("operator reply queued", slog.Int64("thread_id", int64(thread)), slog.Int64("message_id", int64(id)))
	return OmniMessage{ID: id, ThreadID: thread, Direction: DirectionOutbound, Origin: OriginOperator,
		Kind: KindText, Text: text, Status: StatusQueued}, nil
}

const (
	closeThreadQuery = `update omni_threads set state = 'closed', updated_at = ? where id = ?`
	readThreadQuery  = `update omni_threads set unread = 0, updated_at = ? where id = ?`
	upsertRuleQuery  = `
		insert into omni_rules (name, enabled, text, updated_at) values (?, ?, ?, ?)
		on conflict (name) do update set enabled = excluded.enabled, text = excluded.text, updated_at = excluded.updated_at`
)

// CloseThread closes a thread; the contact's next message opens it again.
func (a *Admin) CloseThread(ctx context.Context, thread ThreadID) error {
	return a.updateThread(ctx, closeThreadQuery, thread)
}

// MarkRead clears a thread's unread count.
func (a *Admin) MarkRead(ctx context.Context, thread ThreadID) error {
	return a.updateThread(ctx, readThreadQuery, thread)
}

func (a *Admin) updateThread(ctx context.Context, query string, thread ThreadID) error {
	return a.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, store.TS(a.db.Now()), int64(thread))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrThreadNotFound
		}
		return nil
	})
}

// AutoAck returns the acknowledgement rule in force.
func (a *Admin) AutoAck(ctx context.Context) (AutoAckRule, error) {
	return readAutoAckRule(ctx, a.db.Read, a.domain.autoAck)
}

// SetAutoAck stores the acknowledgement rule; it wins over the configured default.
func (a *Admin) SetAutoAck(ctx context.Context, rule AutoAckRule) error {
	return a.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, upsertRuleQuery, ruleAutoAck, store.Flag(rule.Enabled), rule.Text, store.TS(a.db.Now()))
		return err
	})
}

// HTTP handlers.

func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(mux.Vars(r)["id"], 10, 64)
	if err != nil || id <= 0 {
		return 0, httpjson.BadRequest("bad id %q", mux.Vars(r)["id"])
	}
	return id, nil
}

// httpError maps the domain's errors to HTTP errors.
func httpError(err error) error {
	switch {
	case errors.Is(err, ErrThreadNotFound):
		return httpjson.NotFound("no such thread")
	case errors.Is(err, ErrMessageNotFound):
		return httpjson.NotFound("no such message")
	case errors.Is(err, ErrInvalidFilter):
		return httpjson.BadRequest("%s", strings.TrimPrefix(err.Error(), ErrInvalidFilter.Error()+": "))
	case store.IsFull(err):
		return httpjson.Unavailable("the database is full")
	}
	return err
}

func (a *Admin) listThreads(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := ThreadFilter{State: ThreadState(q.Get("state")), Search: q.Get("q"), Before: q.Get("before"), After: q.Get("after")}
	if f.State != "" && f.State != ThreadOpen && f.State != ThreadClosed {
		return httpjson.BadRequest("state must be open or closed")
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return httpjson.BadRequest("limit must be a positive number")
		}
		f.Limit = n
	}
	threads, err := a.ListThreads(r.Context(), f)
	if err != nil {
		return httpError(err)
	}
	body := map[string]any{"threads": threads}
	if f.After == "" && len(threads) > 0 && len(threads) == threadLimit(f.Limit) {
		// A full window: the next one starts past its last thread.
		body["nextBefore"] = threads[len(threads)-1].Key()
	}
	httpjson.Write(w, http.StatusOK, body)
	return nil
}

func (a *Admin) listMessages(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var f MessageFilter
	q := r.URL.Query()
	if v := q.Get("before"); v != "" {
		if f.BeforeSeq, err = strconv.ParseInt(v, 10, 64); err != nil || f.BeforeSeq <= 0 {
			return httpjson.BadRequest("before must be a thread position (seq)")
		}
	}
	f.Newest = q.Get("newest") == "true"
	if v := q.Get("after"); v != "" {
		if f.AfterSeq, err = strconv.ParseInt(v, 10, 64); err != nil || f.AfterSeq < 0 {
			return httpjson.BadRequest("after must be a thread position (seq)")
		}
	}
	if v := q.Get("limit"); v != "" {
		if f.Limit, err = strconv.Atoi(v); err != nil || f.Limit <= 0 {
			return httpjson.BadRequest("limit must be a positive number")
		}
	}
	msgs, err := a.ListMessages(r.Context(), ThreadID(id), f)
	if err != nil {
		return httpError(err)
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"messages": msgs})
	return nil
}

func (a *Admin) reply(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var body struct {
		Text string `json:"text"`
	}
	if err := httpjson.Decode(r, &body); err != nil {
		return err
	}
	if strings.TrimSpace(body.Text) == "" {
		return httpjson.BadRequest("text is empty")
	}
	if !utf8.ValidString(body.Text) || utf8.RuneCountInString(body.Text) > MaxReplyRunes {
		return httpjson.BadRequest("text must be valid UTF-8 of at most %d characters", MaxReplyRunes)
	}
	m, err := a.Reply(r.Context(), ThreadID(id), body.Text)
	if err != nil {
		return httpError(err)
	}
	httpjson.Write(w, http.StatusAccepted, map[string]any{"messageId": m.ID, "status": m.Status})
	return nil
}

func (a *Admin) closeThread(w http.ResponseWriter, r *http.Request) error {
	return a.threadAction(w, r, a.CloseThread)
}

func (a *Admin) readThread(w http.ResponseWriter, r *http.Request) error {
	return a.threadAction(w, r, a.MarkRead)
}

func (a *Admin) threadAction(w http.ResponseWriter, r *http.Request, act func(context.Context, ThreadID) error) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := act(r.Context(), ThreadID(id)); err != nil {
		return httpError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *Admin) getMessage(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	m, err := a.Message(r.Context(), MessageID(id))
	if err != nil {
		return httpError(err)
	}
	httpjson.Write(w, http.StatusOK, m)
	return nil
}

func (a *Admin) getAutoAck(w http.ResponseWriter, r *http.Request) error {
	rule, err := a.AutoAck(r.Context())
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, rule)
	return nil
}

func (a *Admin) putAutoAck(w http.ResponseWriter, r *http.Request) error {
	var rule AutoAckRule
	if err := httpjson.Decode(r, &rule); err != nil {
		return err
	}
	if rule.Enabled && strings.TrimSpace(rule.Text) == "" {
		return httpjson.BadRequest("an enabled acknowledgement needs a text")
	}
	if utf8.RuneCountInString(rule.Text) > MaxReplyRunes {
		return httpjson.BadRequest("text must be at most %d characters", MaxReplyRunes)
	}
	if err := a.SetAutoAck(r.Context(), rule); err != nil {
		return httpError(err)
	}
	httpjson.Write(w, http.StatusOK, rule)
	return nil
}
