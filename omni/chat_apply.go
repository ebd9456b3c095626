package omni

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/telemetry"
)

// The chat role's transaction: applying one inbound envelope to the chat
// domain. Everything here runs inside the caller's *sql.Tx, together with the
// dedup ledger row and the acknowledgement of the queue message, so an
// envelope takes effect exactly once.

// applyOutcome says what applying an envelope did.
type applyOutcome string

const (
	outcomeApplied   applyOutcome = "applied"
	outcomeDuplicate applyOutcome = "duplicate"
	outcomeIgnored   applyOutcome = "ignored"
)

// applied is the result of applyTx.
type applied struct {
	Outcome applyOutcome
	// Reason says why an ignored envelope was ignored.
	Reason IgnoreReason
	Thread ThreadID
	// Queued are the outgoing messages the envelope's rules queued.
	Queued []MessageID
}

// sendTxFunc puts an outgoing command on sender.flow inside tx.
type sendTxFunc func(ctx context.Context, tx *sql.Tx, cmd SendCommand) error

// chatDomain holds what the chat transactions need besides the tx.
type chatDomain struct {
	now     func() time.Time
	autoAck AutoAckRule // the default when omni_rules has no row
	send    sendTxFunc
	// wake makes receiver.flow's messages of an order key prefix that wait
	// for a retry due now (queue.Queue.WakeTx); nil wakes nothing.
	wake func(ctx context.Context, tx *sql.Tx, orderKeyPrefix string) (int64, error)
	// groups is what becomes of group, supergroup and channel chats.
	groups GroupChats
	// lockThread is the statement that locks a thread's row before a
	// message takes the thread's next seq (threadLockQuery); "" runs none.
	lockThread string
	// stmts are the queries of chatQueries prepared on the writer
	// (prepareChatQueries); nil runs them unprepared.
	stmts map[string]*sql.Stmt
}

// chatQueries are the statements an envelope's transaction runs, prepared
// once on the writer so that applying one does not parse its SQL again:
// parsing was a fifth of the chat role's time.
var chatQueries = []string{
	ledgerSeenQuery, ledgerInsertQuery, upsertContactQuery, insertThreadQuery, selectThreadIDQuery,
	findThreadQuery, findThreadContactQuery, threadStateQuery, findByProviderID, insertMessageSQL, touchThreadQuery,
	editMessageQuery, deleteMessageQuery, selectConnectionQuery, upsertConnectionQuery, setReachableQuery,
	selectRuleQuery, connectionContactsQuery, threadRouteQuery, touchOutgoingQuery, lockThreadQuery,
}

// prepareChatQueries prepares chatQueries on db's writer (on SQLite its one
// connection; on PostgreSQL each pooled connection prepares a statement on
// its first use). It must not run inside a transaction. A statement that
// fails to prepare runs unprepared.
func prepareChatQueries(db *store.DB) map[string]*sql.Stmt {
	stmts := make(map[string]*sql.Stmt, len(chatQueries))
	for _, q := range chatQueries {
		if q == lockThreadQuery && !db.Postgres() {
			continue // SQLite parses no FOR UPDATE
		}
		if st, err := db.Write.PrepareContext(context.Background(), q); err == nil {
			stmts[q] = st
		}
	}
	return stmts
}

// preparedTx runs queries in tx through the statements prepared for them,
// others as they are.
type preparedTx struct {
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

// q is tx with d's prepared statements.
func (d *chatDomain) q(tx *sql.Tx) preparedTx { return preparedTx{tx: tx, stmts: d.stmts} }

func (p preparedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st, ok := p.stmts[query]; ok {
		return p.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return p.tx.QueryRowContext(ctx, query, args...)
}

func (p preparedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st, ok := p.stmts[query]; ok {
		return p.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return p.tx.ExecContext(ctx, query, args...)
}

// lockThreadQuery locks a thread's row until the transaction ends.
const lockThreadQuery = `select id from omni_threads where id = ? for update`

// threadLockQuery is the chatDomain's lockThread on db. A message takes
// the thread's next seq as max(seq) + 1: on SQLite the one writer runs the
// transactions that append to a thread one after another; on PostgreSQL
// they run side by side (the chat role's inbound message and an operator's
// reply, two operators' replies), so each first locks the thread's row,
// and reads max(seq) once the one before it has committed. SQLite does not
// parse FOR UPDATE and needs no lock.
func threadLockQuery(db *store.DB) string {
	if db.Postgres() {
		return lockThreadQuery
	}
	return ""
}

const (
	ledgerSeenQuery   = `select 1 from omni_inbound_events where idempotency_key = ?`
	ledgerInsertQuery = `
		insert into omni_inbound_events (idempotency_key, event_type, thread_id, outcome, reason, occurred_at, received_at, applied_at,
			traceparent)
		values (?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// applyTx applies env in tx and records it in the ledger. A second apply of
// the same idempotency key changes nothing and reports outcomeDuplicate.
func (d *chatDomain) applyTx(ctx context.Context, tx *sql.Tx, env *Envelope) (applied, error) {
	return d.applyWaitingTx(ctx, tx, env, false)
}

// errConnectionUnknown is what applying a business message whose
// connection is not stored yet returns when it may wait for it: nothing was
// written, and the envelope is to be tried again (decideAwaitConnection).
const errConnectionUnknown = Error("omni: the message's business connection is not known yet")

// applyWaitingTx is applyTx; with await, a message of a business connection
// the chat does not know yet is not applied: it fails with
// errConnectionUnknown.
func (d *chatDomain) applyWaitingTx(ctx context.Context, tx *sql.Tx, env *Envelope, await bool) (applied, error) {
	var one int
	switch err := d.q(tx).QueryRowContext(ctx, ledgerSeenQuery, env.IdempotencyKey).Scan(&one); {
	case err == nil:
		return applied{Outcome: outcomeDuplicate}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return applied{}, fmt.Errorf("read ledger: %w", err)
	}
	return d.applyNewTx(ctx, tx, env, await)
}

// ledgerSeenTx returns which of keys the ledger holds: the envelopes of a
// batch already applied, read in one query.
func (d *chatDomain) ledgerSeenTx(ctx context.Context, tx *sql.Tx, keys []string) (map[string]bool, error) {
	seen := map[string]bool{}
	if len(keys) == 0 {
		return seen, nil
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	rows, err := tx.QueryContext(ctx, ledgerSeenManyQuery+"("+placeholders(len(keys))+")", args...)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("read ledger: %w", err)
		}
		seen[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	return seen, nil
}

const ledgerSeenManyQuery = `select idempotency_key from omni_inbound_events where idempotency_key in `

// placeholders is n comma-separated placeholders.
func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

// applyNewTx is applyWaitingTx for an envelope the ledger does not hold.
func (d *chatDomain) applyNewTx(ctx context.Context, tx *sql.Tx, env *Envelope, await bool) (applied, error) {
	if env.EventType == EventInvalid {
		return applied{}, invalidEnvelope(env)
	}
	var (
		res applied
		err error
	)
	if reason, ignore := decideIgnore(env, d.groups); ignore {
		res = applied{Outcome: outcomeIgnored, Reason: reason}
	} else {
		res, err = d.apply(ctx, tx, env, await)
	}
	if err != nil {
		return applied{}, fmt.Errorf("apply %s %s: %w", env.EventType, env.IdempotencyKey, err)
	}
	var thread, reason any
	if res.Thread != 0 {
		thread = int64(res.Thread)
	}
	if res.Reason != "" {
		reason = string(res.Reason)
	}
	if _, err := d.q(tx).ExecContext(ctx, ledgerInsertQuery, env.IdempotencyKey, string(env.EventType), thread,
		string(res.Outcome), reason, store.TS(env.OccurredAt), store.TS(env.ReceivedAt), store.TS(d.now()),
		telemetry.Traceparent(ctx)); err != nil {
		return applied{}, fmt.Errorf("write ledger: %w", err)
	}
	return res, nil
}

// invalidEnvelope is the permanent failure of an invalid envelope: no
// attempt can apply it, so it goes to the dead letters with its reason.
func invalidEnvelope(env *Envelope) error {
	n := &env.PayloadNormalized
	return queue.Permanent(fmt.Errorf("envelope %s: telegram update %q cannot be used: %s",
		env.IdempotencyKey, n.UpdateType, n.Reason))
}

// apply applies an envelope the chat role uses to the chat domain.
// With await, a message of an unknown business connection fails with
// errConnectionUnknown.
func (d *chatDomain) apply(ctx context.Context, tx *sql.Tx, env *Envelope, await bool) (applied, error) {
	switch env.EventType {
	case EventMessageCreated, EventCallbackReceived:
		return d.messageCreated(ctx, tx, env, nil, await)
	case EventMessageEdited:
		return d.messageEdited(ctx, tx, env, await)
	case EventMessageDeleted:
		return d.messageDeleted(ctx, tx, env)
	case EventConnectionUpdated:
		return d.connectionUpdated(ctx, tx, env)
	case EventMembershipUpdated:
		return d.membershipUpdated(ctx, tx, env)
	}
	return applied{Outcome: outcomeIgnored, Reason: IgnoreUnknownUpdate}, nil
}

// validFor reports whether env carries what its event type needs; the
// schema promises it, but a hand-made envelope may not keep the promise.
func validFor(env *Envelope) error {
	n := &env.PayloadNormalized
	switch env.EventType {
	case EventMessageCreated, EventMessageEdited:
		if n.Chat == nil || n.Message == nil {
			return errors.New("envelope lacks chat or message")
		}
	case EventCallbackReceived:
		if n.Chat == nil || n.Callback == nil {
			return errors.New("envelope lacks chat or callback")
		}
	case EventMessageDeleted:
		if n.Chat == nil {
			return errors.New("envelope lacks chat")
		}
	case EventConnectionUpdated:
		if n.Connection == nil {
			return errors.New("envelope lacks connection")
		}
	case EventMembershipUpdated:
		if n.Chat == nil || n.Membership == nil {
			return errors.New("envelope lacks chat or membership")
		}
	case EventInvalid:
		if n.Reason == "" {
			return errors.New("invalid envelope lacks its reason")
		}
		return nil
	}
	if env.Channel == ChannelTelegramBusiness && n.BusinessConnectionID == "" {
		return errors.New("business envelope lacks businessConnectionId")
	}
	return nil
}

const (
	upsertContactQuery = `
		insert into omni_contacts (provider, business_connection_id, provider_user_id, name, username, reachable, created_at, updated_at)
		values (?, ?, ?, ?, ?, 1, ?, ?)
		on conflict (provider, business_connection_id, provider_user_id) do update set
			name = case when excluded.name <> '' then excluded.name else omni_contacts.name end,
			username = case when excluded.username <> '' then excluded.username else omni_contacts.username end,
			updated_at = excluded.updated_at
		returning id`
	insertThreadQuery = `
		insert into omni_threads (contact_id, channel, business_connection_id, bot_id, chat_id, state, unread, created_at, updated_at)
		values (?, ?, ?, ?, ?, 'open', 0, ?, ?)
		on conflict (contact_id, channel, business_connection_id) do nothing`
	selectThreadIDQuery = `select id from omni_threads where contact_id = ? and channel = ? and business_connection_id = ?`
	findThreadQuery     = `
		select t.id from omni_threads t join omni_contacts c on c.id = t.contact_id
		where c.provider = ? and c.business_connection_id = ? and c.provider_user_id = ? and t.channel = ?`
	findThreadContactQuery = `
		select t.id, c.name, c.username from omni_threads t join omni_contacts c on c.id = t.contact_id
		where c.provider = ? and c.business_connection_id = ? and c.provider_user_id = ? and t.channel = ?`
	findByProviderID = `select id, edited_at from omni_messages where thread_id = ? and provider_message_id = ?`
	// threadStateQuery reads, for a new message of an existing thread, the
	// message of the same provider id (null: none) and whether the thread
	// has an inbound message.
	threadStateQuery = `
		select (select id from omni_messages where thread_id = ? and provider_message_id = ?),
			(select count(*) from (select 1 from omni_messages where thread_id = ? and direction = 'inbound' limit 1) as inbound)`
	// insertMessageSQL takes the thread's next seq as max(seq) + 1.
	insertMessageSQL = `
		insert into omni_messages (thread_id, seq, direction, origin, kind, text, status, provider_message_id,
			provider_event_id, provider_date, edited_at, sent_at, created_at, updated_at, traceparent)
		values (?, (select coalesce(max(seq), 0) + 1 from omni_messages where thread_id = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		returning id`
	touchThreadQuery = `
		update omni_threads set
			last_message_at = case when last_message_at is null or last_message_at < ? then ? else last_message_at end,
			unread = unread + ?,
			state = case when ? = 1 then 'open' else state end,
			updated_at = ?
		where id = ?`
	editMessageQuery   = `update omni_messages set text = ?, kind = ?, edited_at = ?, updated_at = ? where id = ?`
	deleteMessageQuery = `
		update omni_messages set deleted_at = ?, updated_at = ?
		where thread_id = ? and provider_message_id = ? and deleted_at is null`
	selectConnectionQuery = `
		select id, bot_id, user_id, user_chat_id, enabled, can_reply, updated_at
		from omni_business_connections where id = ?`
	upsertConnectionQuery = `
		insert into omni_business_connections (id, bot_id, user_id, user_chat_id, enabled, can_reply, event_date, created_at, updated_at)
		values (?, ?, ?, ?, ?, ?, ?, ?, ?)
		on conflict (id) do update set
			bot_id = excluded.bot_id, user_id = excluded.user_id, user_chat_id = excluded.user_chat_id,
			enabled = excluded.enabled, can_reply = excluded.can_reply,
			event_date = excluded.event_date, updated_at = excluded.updated_at
		where omni_business_connections.event_date <= excluded.event_date`
	setReachableQuery = `update omni_contacts set reachable = ?, unreachable_reason = ?, updated_at = ? where id = ?`
	selectRuleQuery   = `select enabled, text from omni_rules where name = ?`
	// connectionContactsQuery tells whether a business connection has
	// contacts: its messages were applied (without it, if it is unknown).
	connectionContactsQuery = `
		select count(*) from (select 1 from omni_contacts where provider = ? and business_connection_id = ? limit 1) as known`
)

// threadRef is a thread found or created for an envelope.
type threadRef struct {
	ID      ThreadID
	Created bool
}

// contactTx upserts the contact of env's chat and returns its id.
func (d *chatDomain) contactTx(ctx context.Context, tx *sql.Tx, env *Envelope) (ContactID, error) {
	n := &env.PayloadNormalized
	now := store.TS(d.now())
	var id ContactID
	err := d.q(tx).QueryRowContext(ctx, upsertContactQuery, string(env.Provider), n.BusinessConnectionID, n.Chat.ID,
		contactName(n.Chat), n.Chat.Username, now, now).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("upsert contact: %w", err)
	}
	return id, nil
}

// threadTx finds or creates the thread of env's chat, and keeps its
// contact's name and username as the chat shows them: in one read when the
// thread exists and the contact is unchanged.
func (d *chatDomain) threadTx(ctx context.Context, tx *sql.Tx, env *Envelope) (threadRef, error) {
	n := &env.PayloadNormalized
	var (
		id             ThreadID
		name, username string
	)
	switch err := d.q(tx).QueryRowContext(ctx, findThreadContactQuery, string(env.Provider), n.BusinessConnectionID, n.Chat.ID,
		string(env.Channel)).Scan(&id, &name, &username); {
	case err == nil:
		if newName := contactName(n.Chat); (newName == "" || newName == name) && (n.Chat.Username == "" || n.Chat.Username == username) {
			return threadRef{ID: id}, nil
		}
	case !errors.Is(err, sql.ErrNoRows):
		return threadRef{}, fmt.Errorf("find thread: %w", err)
	}
	contact, err := d.contactTx(ctx, tx, env)
	if err != nil {
		return threadRef{}, err
	}
	if id != 0 {
		return threadRef{ID: id}, nil
	}
	now := store.TS(d.now())
	res, err := d.q(tx).ExecContext(ctx, insertThreadQuery, int64(contact), string(env.Channel), n.BusinessConnectionID,
		n.AccountID, n.Chat.ID, now, now)
	if err != nil {
		return threadRef{}, fmt.Errorf("insert thread: %w", err)
	}
	created, err := res.RowsAffected()
	if err != nil {
		return threadRef{}, err
	}
	// Read again: on PostgreSQL another transaction may have created it
	// meanwhile.
	if err := d.q(tx).QueryRowContext(ctx, selectThreadIDQuery, int64(contact), string(env.Channel), n.BusinessConnectionID).Scan(&id); err != nil {
		return threadRef{}, fmt.Errorf("read thread: %w", err)
	}
	return threadRef{ID: id, Created: created == 1}, nil
}

// existingThreadTx finds the thread of env's chat without creating one.
func (d *chatDomain) existingThreadTx(ctx context.Context, tx *sql.Tx, env *Envelope) (ThreadID, bool, error) {
	n := &env.PayloadNormalized
	var id ThreadID
	err := d.q(tx).QueryRowContext(ctx, findThreadQuery, string(env.Provider), n.BusinessConnectionID, n.Chat.ID, string(env.Channel)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("find thread: %w", err)
	}
	return id, true, nil
}

// connectionTx reads a business connection; nil when unknown.
func connectionTx(ctx context.Context, q queryRower, id string) (*BusinessConnection, error) {
	if id == "" {
		return nil, nil
	}
	var (
		c         BusinessConnection
		enabled   int
		reply     int
		updatedAt store.Timestamp
	)
	err := q.QueryRowContext(ctx, selectConnectionQuery, id).Scan(&c.ID, &c.BotID, &c.UserID, &c.UserChatID, &enabled, &reply, &updatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read business connection: %w", err)
	}
	c.Enabled, c.CanReply, c.UpdatedAt = enabled == 1, reply == 1, updatedAt.Time
	return &c, nil
}

// queryRower is a *sql.Tx or a *sql.DB.
type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// messageCreated stores a new message (or a pressed button) in its thread,
// and queues the automatic acknowledgement when the rules say so. editedAt is
// set when an edit arrives for a message the thread does not have. Both
// need the message's business connection (whose owner writes outbound
// messages, and which says whether the thread can be answered): with await,
// a business message whose connection is not stored yet is left for later
// (errConnectionUnknown), before anything is written.
func (d *chatDomain) messageCreated(ctx context.Context, tx *sql.Tx, env *Envelope, editedAt *time.Time, await bool) (applied, error) {
	n := &env.PayloadNormalized
	var conn *BusinessConnection
	if n.BusinessConnectionID != "" {
		var err error
		if conn, err = connectionTx(ctx, d.q(tx), n.BusinessConnectionID); err != nil {
			return applied{}, err
		}
		if conn == nil && await {
			// A connection the chat has applied messages without before
			// (their wait ran out) is not waited for again.
			var known int
			if err := d.q(tx).QueryRowContext(ctx, connectionContactsQuery, string(env.Provider), n.BusinessConnectionID).Scan(&known); err != nil {
				return applied{}, fmt.Errorf("read contacts: %w", err)
			}
			if known == 0 {
				return applied{}, errConnectionUnknown
			}
		}
	}
	th, err := d.threadTx(ctx, tx, env)
	if err != nil {
		return applied{}, err
	}
	res := applied{Outcome: outcomeApplied, Thread: th.ID}

	class := classifyMessage(n, conn)
	kind, text, providerID := KindCallback, "", (*string)(nil)
	date := env.OccurredAt
	if n.Message != nil {
		kind, text, date = n.Message.Kind, n.Message.Text, n.Message.Date
		providerID = env.ProviderMessageID
	} else if n.Callback != nil {
		text = n.Callback.Data
	}
	// A new thread has no messages. In another, the same provider message
	// may have come in another update, and one inbound message makes this
	// one not the first.
	firstInbound := class.Direction == DirectionInbound
	if !th.Created {
		var (
			existing sql.NullInt64
			inbound  int
			pid      any
		)
		if providerID != nil {
			pid = *providerID
		}
		if err := d.q(tx).QueryRowContext(ctx, threadStateQuery, int64(th.ID), pid, int64(th.ID)).Scan(&existing, &inbound); err != nil {
			return applied{}, fmt.Errorf("read thread %d: %w", th.ID, err)
		}
		if existing.Valid {
			return res, nil
		}
		firstInbound = firstInbound && inbound == 0
	}
	now := d.now()
	var sentAt store.Timestamp
	if class.Status == StatusSent {
		sentAt = store.TS(date)
	}
	var edited store.Timestamp
	if editedAt != nil {
		edited = store.TS(*editedAt)
	}
	if _, err := d.insertMessageTx(ctx, tx, th.ID, class.Direction, class.Origin, kind, text, class.Status,
		providerID, env.ProviderEventID, store.TS(date), edited, sentAt, now); err != nil {
		return applied{}, err
	}
	unread := 0
	if class.Unread {
		unread = 1
	}
	if _, err := d.q(tx).ExecContext(ctx, touchThreadQuery, store.TS(date), store.TS(date), unread, store.Flag(class.Direction == DirectionInbound),
		store.TS(now), int64(th.ID)); err != nil {
		return applied{}, fmt.Errorf("touch thread: %w", err)
	}

	if !firstInbound {
		return res, nil // never acknowledged: no need to read the rule
	}
	rule, err := d.autoAckRuleTx(ctx, tx)
	if err != nil {
		return applied{}, err
	}
	if ackText, ok := decideAutoAck(rule, class, firstInbound, n.Chat, env.Channel, conn); ok {
		id, err := d.queueOutgoingTx(ctx, tx, th.ID, OriginRule, ackText)
		if err != nil {
			return applied{}, fmt.Errorf("queue auto-acknowledgement: %w", err)
		}
		res.Queued = append(res.Queued, id)
	}
	return res, nil
}

// insertMessageTx appends a message to a thread, taking the thread's next
// seq: distinct, and in commit order, with concurrent writers too (see
// threadLockQuery).
func (d *chatDomain) insertMessageTx(ctx context.Context, tx *sql.Tx, thread ThreadID, dir Direction, origin Origin,
	kind MessageKind, text string, status Status, providerID *string, eventID string,
	providerDate, editedAt, sentAt store.Timestamp, now time.Time) (MessageID, error) {
	if d.lockThread != "" {
		var locked ThreadID
		if err := d.q(tx).QueryRowContext(ctx, d.lockThread, int64(thread)).Scan(&locked); err != nil {
			return 0, fmt.Errorf("lock thread %d: %w", thread, err)
		}
	}
	var pid, eid any
	if providerID != nil {
		pid = *providerID
	}
	if eventID != "" {
		eid = eventID
	}
	var id MessageID
	err := d.q(tx).QueryRowContext(ctx, insertMessageSQL, int64(thread), int64(thread), string(dir), string(origin), string(kind), text,
		string(status), pid, eid, providerDate, editedAt, sentAt, store.TS(now), store.TS(now), telemetry.Traceparent(ctx)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert message: %w", err)
	}
	return id, nil
}

// messageEdited replaces a stored message's text with a newer edit, or stores
// the edited message when the thread never had it.
func (d *chatDomain) messageEdited(ctx context.Context, tx *sql.Tx, env *Envelope, await bool) (applied, error) {
	n := &env.PayloadNormalized
	editedAt := env.OccurredAt
	if n.Message.EditedAt != nil {
		editedAt = *n.Message.EditedAt
	}
	th, found, err := d.existingThreadTx(ctx, tx, env)
	if err != nil {
		return applied{}, err
	}
	if found {
		var (
			id     MessageID
			stored store.Timestamp
		)
		err := d.q(tx).QueryRowContext(ctx, findByProviderID, int64(th), *env.ProviderMessageID).Scan(&id, &stored)
		switch {
		case err == nil:
			if !decideEdit(stored.Time, editedAt) {
				return applied{Outcome: outcomeIgnored, Reason: IgnoreStaleEdit, Thread: th}, nil
			}
			if _, err := d.q(tx).ExecContext(ctx, editMessageQuery, n.Message.Text, string(n.Message.Kind),
				store.TS(editedAt), store.TS(d.now()), int64(id)); err != nil {
				return applied{}, fmt.Errorf("edit message: %w", err)
			}
			return applied{Outcome: outcomeApplied, Thread: th}, nil
		case !errors.Is(err, sql.ErrNoRows):
			return applied{}, fmt.Errorf("find message: %w", err)
		}
	}
	return d.messageCreated(ctx, tx, env, &editedAt, await)
}

// messageDeleted marks the deleted messages of a thread; the rows stay so the
// operator sees what was said and that it was deleted.
func (d *chatDomain) messageDeleted(ctx context.Context, tx *sql.Tx, env *Envelope) (applied, error) {
	th, found, err := d.existingThreadTx(ctx, tx, env)
	if err != nil {
		return applied{}, err
	}
	if !found {
		return applied{Outcome: outcomeIgnored, Reason: IgnoreNoThread}, nil
	}
	now := store.TS(d.now())
	for _, id := range env.PayloadNormalized.DeletedMessageIDs {
		if _, err := d.q(tx).ExecContext(ctx, deleteMessageQuery, store.TS(env.OccurredAt), now, int64(th), id); err != nil {
			return applied{}, fmt.Errorf("delete message: %w", err)
		}
	}
	return applied{Outcome: outcomeApplied, Thread: th}, nil
}

// connectionUpdated keeps a business connection's state; an update older
// than the stored one changes nothing.
func (d *chatDomain) connectionUpdated(ctx context.Context, tx *sql.Tx, env *Envelope) (applied, error) {
	c := env.PayloadNormalized.Connection
	now := store.TS(d.now())
	res, err := d.q(tx).ExecContext(ctx, upsertConnectionQuery, c.ID, env.PayloadNormalized.AccountID, c.UserID, c.UserChatID,
		store.Flag(c.Enabled), store.Flag(c.CanReply), store.TS(c.Date), now, now)
	if err != nil {
		return applied{}, fmt.Errorf("upsert business connection: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return applied{}, err
	} else if n == 0 {
		return applied{Outcome: outcomeIgnored, Reason: IgnoreStaleConnection}, nil
	}
	// The connection's first messages may be waiting for it: they go now,
	// not at their next look.
	if d.wake != nil {
		if _, err := d.wake(ctx, tx, connectionChatsKey(env)); err != nil {
			return applied{}, err
		}
	}
	return applied{Outcome: outcomeApplied}, nil
}

// membershipUpdated marks the contact unreachable when the user blocked the
// bot, and reachable again when they restarted it.
func (d *chatDomain) membershipUpdated(ctx context.Context, tx *sql.Tx, env *Envelope) (applied, error) {
	change := decideMembership(env.PayloadNormalized.Membership)
	if !change.Change {
		return applied{Outcome: outcomeIgnored, Reason: IgnoreMembershipUnchanged}, nil
	}
	contact, err := d.contactTx(ctx, tx, env)
	if err != nil {
		return applied{}, err
	}
	var reason any
	if change.Reason != "" {
		reason = change.Reason
	}
	if _, err := d.q(tx).ExecContext(ctx, setReachableQuery, store.Flag(change.Reachable), reason, store.TS(d.now()), int64(contact)); err != nil {
		return applied{}, fmt.Errorf("set reachable: %w", err)
	}
	th, _, err := d.existingThreadTx(ctx, tx, env)
	if err != nil {
		return applied{}, err
	}
	return applied{Outcome: outcomeApplied, Thread: th}, nil
}

// autoAckRuleTx reads the auto-acknowledgement rule: the operator's stored
// version, else the configured default.
func (d *chatDomain) autoAckRuleTx(ctx context.Context, tx *sql.Tx) (AutoAckRule, error) {
	return readAutoAckRule(ctx, d.q(tx), d.autoAck)
}

func readAutoAckRule(ctx context.Context, q queryRower, def AutoAckRule) (AutoAckRule, error) {
	var (
		enabled int
		text    string
	)
	err := q.QueryRowContext(ctx, selectRuleQuery, ruleAutoAck).Scan(&enabled, &text)
	if errors.Is(err, sql.ErrNoRows) {
		return def, nil
	}
	if err != nil {
		return AutoAckRule{}, fmt.Errorf("read rule %s: %w", ruleAutoAck, err)
	}
	return AutoAckRule{Enabled: enabled == 1, Text: text}, nil
}

const (
	threadRouteQuery = `
		select t.channel, t.business_connection_id, t.bot_id, t.chat_id, c.provider
		from omni_threads t join omni_contacts c on c.id = t.contact_id where t.id = ?`
	touchOutgoingQuery = `
		update omni_threads set
			last_message_at = case when last_message_at is null or last_message_at < ? then ? else last_message_at end,
			unread = case when ? = 1 then 0 else unread end,
			updated_at = ?
		where id = ?`
)

// queueOutgoingTx appends an outbound message in status queued to a thread
// and puts its send command on sender.flow, in tx: the message exists if and
// only if its command does.
func (d *chatDomain) queueOutgoingTx(ctx context.Context, tx *sql.Tx, thread ThreadID, origin Origin, text string) (MessageID, error) {
	var channel, conn, botID, chatID, provider string
	err := d.q(tx).QueryRowContext(ctx, threadRouteQuery, int64(thread)).Scan(&channel, &conn, &botID, &chatID, &provider)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrThreadNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("read thread: %w", err)
	}
	now := d.now()
	id, err := d.insertMessageTx(ctx, tx, thread, DirectionOutbound, origin, KindText, text, StatusQueued,
		nil, "", store.Timestamp{}, store.Timestamp{}, store.Timestamp{}, now)
	if err != nil {
		return 0, err
	}
	// An operator who replies has read the thread.
	if _, err := d.q(tx).ExecContext(ctx, touchOutgoingQuery, store.TS(now), store.TS(now), store.Flag(origin == OriginOperator),
		store.TS(now), int64(thread)); err != nil {
		return 0, fmt.Errorf("touch thread: %w", err)
	}
	cmd := SendCommand{
		Version: 1, MessageID: id, Provider: Provider(provider), AccountID: botID, Channel: Channel(channel),
		BusinessConnectionID: conn, ChatID: chatID, Text: text,
	}
	if err := d.send(ctx, tx, cmd); err != nil {
		return 0, fmt.Errorf("enqueue send command: %w", err)
	}
	return id, nil
}
