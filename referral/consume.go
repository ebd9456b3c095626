package referral

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"switchyard/mask"
	"switchyard/store"
	"switchyard/telemetry"
)

// This file is the consumers' transaction: steps 1–8 of the spec for one
// message of pin.identity.users.v1, inside the transaction the consumer group
// hands its handler (which also commits the offset). Every SQL statement the
// transaction runs sits here.

// inbound is one record of pin.identity.users.v1 as the handler sees it.
type inbound struct {
	Key       string
	Value     []byte
	Partition int
	Offset    int64
	Attempt   int // 1 on the first delivery
}

// txPublisher appends a record to a topic inside the caller's transaction.
type txPublisher interface {
	publishTx(ctx context.Context, tx *sql.Tx, key string, value []byte) error
}

// result is what one message did; the handler logs and counts it.
type result struct {
	Type          MessageType
	MessageID     string
	CorrelationID string
	UserID        UserID
	Duplicate     bool
	Ignored       bool // a message type these consumers do not handle
	VersionDiffer bool // contractVersion is not ContractVersion (warn and proceed)

	ReplicaApplied bool  // branch A (or the block) changed the replica
	ReplicaVersion int64 // the replica's version after the message
	Outcome        Outcome
	Slug           string
	LinkID         LinkID
	BondID         BondID
	LeadRequested  bool
	RegisteredVia  string
	Phone          string // masked
	BoundAt        time.Time
}

// apply runs one message in tx. Its error tells the queue what to do: a
// queue-permanent error (ErrBadPayload) goes to the dead-letter queue,
// ErrOwnerReplicaMissing and storage errors are retried.
func (s *Service) apply(ctx context.Context, tx *sql.Tx, in inbound) (result, error) {
	env, err := parseEnvelope(in.Value)
	if err != nil {
		return result{}, err
	}
	res := result{
		Type:          env.Type,
		MessageID:     env.MessageID,
		CorrelationID: env.CorrelationID,
		VersionDiffer: env.ContractVersion != ContractVersion,
	}
	switch env.Type {
	case TypeUserUpserted:
		ev, err := parseUserUpserted(env)
		res.UserID = ev.UserID
		if err != nil {
			return res, err
		}
		return s.applyUpserted(ctx, tx, ev, res)
	case TypeUserBlocked:
		ev, err := parseUserBlocked(env)
		res.UserID = ev.UserID
		if err != nil {
			return res, err
		}
		return s.applyBlocked(ctx, tx, ev, res)
	default:
		res.Ignored = true
		return res, nil
	}
}

// applyUpserted is ReferralUserUpsertedConsumer: branch A on every event,
// branch B (trigger T1, rule R1) on a first-seen user with a ReferrerUrl.
func (s *Service) applyUpserted(ctx context.Context, tx *sql.Tx, ev UserUpserted, res result) (result, error) {
	res.RegisteredVia = ev.RegisteredVia
	res.Phone = mask.Phone(ev.PhoneNumber)
	q := s.prepared(tx)
	mark := string(TypeUserUpserted) + ":" + ev.MessageID
	own, err := readUserFacts(ctx, q, mark, ev.UserID)
	if err != nil || own.Duplicate {
		res.Duplicate = own.Duplicate
		return res, err
	}
	now := s.db.Now()

	// Branch A: the replica, behind the version guard.
	replica, ok := upsertReplica(ev, own.Held, now)
	if ok {
		if err := putReplica(ctx, q, replica); err != nil {
			return res, err
		}
	}
	res.ReplicaApplied, res.ReplicaVersion = ok, replica.ReplicaVersion

	// Branch B: read what the rule needs, then decide.
	facts := attachFacts{Event: ev, HasInitial: own.HasInitial, HasActiveBond: own.HasActiveBond}
	if ev.ReferrerURL != nil && !facts.HasInitial {
		if slug, valid := NormalizeSlug(*ev.ReferrerURL); valid {
			if err := s.readAttachFacts(ctx, q, slug, &facts); err != nil {
				return res, err
			}
		}
	}
	d := decideAttach(facts)
	res.Outcome, res.Slug, res.LeadRequested = d.Outcome, d.Slug, d.LeadRequested
	if facts.Link != nil {
		res.LinkID = facts.Link.ID
	}
	switch d.Outcome {
	case OutcomeOwnerMissing:
		return res, ErrOwnerReplicaMissing
	case OutcomeR1:
		bondID, won, err := s.bind(ctx, tx, ev, *facts.Link, d.LeadRequested, now)
		if err != nil {
			return res, err
		}
		if won {
			res.BondID, res.BoundAt = bondID, ev.OccurredAt
		} else {
			res.Outcome, res.LeadRequested = OutcomeRaceLost, false
		}
	}
	return res, putMark(ctx, q, mark, ev.UserID, res.Outcome, now)
}

// readAttachFacts reads, in the spec's order, the link and its owner's
// replica, which decideAttach needs besides the user's own facts
// (readUserFacts); it stops reading once the answer cannot change.
//
// The link and its owner's replica are other rows than the user's own,
// which other transactions change: an operator deletes the link, the
// owner's own events change the owner. On SQLite the one writer keeps them
// still until this transaction commits. On PostgreSQL the two reads lock
// the rows they find (FOR SHARE, see Service.linkQuery) until then, so that
// a deletion or an owner's change waits for the bond decided on the rows as
// read, and a deletion that committed first is seen (G1): no bond is made
// through a link after its deletion returned, no lead is requested on an
// owner state that was already superseded, and the marks' order is an
// order in which the messages took effect on both backends.
func (s *Service) readAttachFacts(ctx context.Context, tx dbtx, slug string, f *attachFacts) error {
	var err error
	if f.Link, err = scanLinkRow(tx.QueryRowContext(ctx, s.linkQuery, slug)); err != nil || f.Link == nil {
		return err
	}
	f.Owner, err = scanReplicaRow(tx.QueryRowContext(ctx, s.ownerQuery, string(f.Link.OwnerUserID)))
	return err
}

// bind writes R1's bond and Initial entry, pointing at each other, and the
// outgoing events. won is false when a unique index says another attach
// trigger bound the user first: then nothing is written and nothing is
// published (idempotent completion).
func (s *Service) bind(ctx context.Context, tx *sql.Tx, ev UserUpserted, l Link, lead bool, now time.Time) (BondID, bool, error) {
	bondID, regID := BondID(newID()), RegistrationID(newID())
	b, r := newBond(ev, l, lead, bondID, regID, now)
	q := s.prepared(tx)
	won, err := insertBond(ctx, q, b)
	if err != nil || !won {
		return "", false, err
	}
	if won, err = insertRegistration(ctx, q, r); err != nil {
		return "", false, err
	}
	if !won {
		if _, err := q.ExecContext(ctx, deleteBondQuery, string(b.ID)); err != nil {
			return "", false, err
		}
		return "", false, nil
	}
	value, err := bondCreatedEvent(ev.meta, b, l.Channel, now)
	if err != nil {
		return "", false, err
	}
	if err := publishOutgoing(ctx, tx, s.bondsOut, TopicBonds, TypeBondCreated, b.ID, ev.CorrelationID, string(b.ReferredUserID), value); err != nil {
		return "", false, fmt.Errorf("publish bond-created: %w", err)
	}
	if lead {
		value, err := leadAttachRequestedEvent(ev.meta, b, l, now)
		if err != nil {
			return "", false, err
		}
		if err := publishOutgoing(ctx, tx, s.leadsOut, TopicLeadAttachments, TypeLeadAttachRequested, b.ID, ev.CorrelationID, string(b.ReferredUserID), value); err != nil {
			return "", false, fmt.Errorf("publish lead-attach-requested: %w", err)
		}
	}
	return b.ID, true, nil
}

// applyBlocked is ReferralUserBlockedConsumer: Status = Blocked behind the
// version guard; a user without a replica is a warning and a no-op. It
// publishes nothing.
func (s *Service) applyBlocked(ctx context.Context, tx *sql.Tx, ev UserBlocked, res result) (result, error) {
	q := s.prepared(tx)
	mark := string(TypeUserBlocked) + ":" + ev.MessageID
	own, err := readUserFacts(ctx, q, mark, ev.UserID)
	if err != nil || own.Duplicate {
		res.Duplicate = own.Duplicate
		return res, err
	}
	held, now := own.Held, s.db.Now()
	replica, ok := blockReplica(ev, held, now)
	switch {
	case held == nil:
		res.Outcome = OutcomeNoReplica
	case !ok:
		res.Outcome, res.ReplicaVersion = OutcomeStale, held.ReplicaVersion
	default:
		if err := blockStatus(ctx, q, replica); err != nil {
			return res, err
		}
		res.Outcome, res.ReplicaApplied, res.ReplicaVersion = OutcomeBlocked, true, replica.ReplicaVersion
	}
	return res, putMark(ctx, q, mark, ev.UserID, res.Outcome, now)
}

// userFacts is what a consumer reads of the message's user first.
type userFacts struct {
	Duplicate     bool     // the message's idempotency mark is there: it was applied before
	Held          *Replica // the user's replica as held; nil when there is none
	HasInitial    bool     // the user has an Initial journal entry (first-seen, branch B)
	HasActiveBond bool     // the user has an Active bond (G5)
}

// readUserFacts reads, in one statement, the message's mark and the user's
// own rows every consumer starts from. Only this user's messages write
// them, one at a time in offset order (the topic's key is the user), so it
// does not matter where in the transaction they are read.
func readUserFacts(ctx context.Context, q querier, mark string, user UserID) (userFacts, error) {
	var (
		f                   userFacts
		r                   Replica
		id, typ, status     sql.NullString
		first, last, phone  sql.NullString
		filled              sql.NullBool
		version             sql.NullInt64
		registered, updated store.Timestamp
	)
	err := q.QueryRowContext(ctx, userFactsQuery, mark, string(user), string(user), string(user)).Scan(
		&f.Duplicate, &f.HasInitial, &f.HasActiveBond,
		&id, &typ, &r.CompanyID, &status, &first, &last, &r.Name.MiddleName,
		&phone, &filled, &registered, &version, &updated)
	if err != nil || f.Duplicate || !id.Valid {
		return f, err
	}
	r.ID, r.Type, r.Status = UserID(id.String), UserType(typ.String), UserStatus(status.String)
	r.Name.FirstName, r.Name.LastName, r.PhoneNumber = first.String, last.String, phone.String
	r.IsNameFilled, r.ReplicaVersion = filled.Bool, version.Int64
	r.RegisteredAt, r.UpdatedAt = registered.Time, updated.Time
	f.Held = &r
	return f, nil
}

// prepared wraps tx so the consumer's queries use the prepared statements.
func (s *Service) prepared(tx *sql.Tx) preparedTx {
	p := preparedTx{tx: tx, stmts: s.stmts, spans: s.storeSpans}
	// The statements bound to tx are kept for the run of the transaction
	// function: the queue hands a chunk of records to one run, and binding
	// a statement to a transaction (Tx.StmtContext) costs a statement,
	// locks and a dependency entry each time.
	if v, ok := s.db.TxValue(tx, txStmtsKey{}, func() any { return map[string]*sql.Stmt{} }); ok {
		p.bound = v.(map[string]*sql.Stmt)
	}
	return p
}

// txStmtsKey keeps a run's statements bound to its transaction (TxValue).
type txStmtsKey struct{}

func newID() string { return uuid.Must(uuid.NewV7()).String() }

// querier is what the read pool, a transaction and a preparedTx offer.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// dbtx is a transaction as the consumer's SQL uses it.
type dbtx interface {
	querier
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// consumerQueries are prepared once on the writer connection (New), so the
// consumer's transaction does not parse its SQL again for every record;
// New adds the link and owner reads of its dialect.
var consumerQueries = []string{
	userFactsQuery, putMarkQuery, putReplicaQuery, blockStatusQuery,
	insertBondQuery, insertRegistrationQuery, deleteBondQuery,
}

// preparedTx runs the consumer's queries in tx through statements prepared
// on the writer connection; other queries go to tx as they are.
type preparedTx struct {
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
	bound map[string]*sql.Stmt // stmts bound to tx so far; nil for a tx not begun by db.Tx
	spans *storeSpans          // names each statement's storage span (trace.go)
}

// stmt returns query's statement bound to tx, or nil for a query not
// prepared.
func (p preparedTx) stmt(ctx context.Context, query string) *sql.Stmt {
	if st := p.bound[query]; st != nil {
		return st
	}
	st, ok := p.stmts[query]
	if !ok {
		return nil
	}
	st = p.tx.StmtContext(ctx, st)
	if p.bound != nil {
		p.bound[query] = st
	}
	return st
}

// QueryRowContext runs query, a storage span of its own when traced (its
// row is read when it returns: the span ends then).
func (p preparedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	ctx, span := p.spans.start(ctx, query)
	row := p.queryRow(ctx, query, args...)
	if span.IsRecording() {
		telemetry.End(span, row.Err())
	}
	return row
}

func (p preparedTx) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return p.tx.QueryRowContext(ctx, query, args...)
}

// ExecContext runs query, a storage span of its own when traced.
func (p preparedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx, span := p.spans.start(ctx, query)
	res, err := p.exec(ctx, query, args...)
	telemetry.End(span, err)
	return res, err
}

func (p preparedTx) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return p.tx.ExecContext(ctx, query, args...)
}

const putMarkQuery = `insert into referral_processed_messages (mark, user_id, outcome, processed_at, traceparent) values (?, ?, ?, ?, ?)`

func putMark(ctx context.Context, tx dbtx, mark string, user UserID, outcome Outcome, now time.Time) error {
	_, err := tx.ExecContext(ctx, putMarkQuery, mark, string(user), string(outcome), store.TS(now), telemetry.Traceparent(ctx))
	return err
}

const replicaColumns = `id, type, company_id, status, first_name, last_name, middle_name,
	phone_number, is_name_filled, registered_at, replica_version, updated_at`

func scanReplica(row interface{ Scan(...any) error }) (*Replica, error) {
	var (
		r                   Replica
		id, typ, status     string
		registered, updated store.Timestamp
	)
	err := row.Scan(&id, &typ, &r.CompanyID, &status, &r.Name.FirstName, &r.Name.LastName, &r.Name.MiddleName,
		&r.PhoneNumber, &r.IsNameFilled, &registered, &r.ReplicaVersion, &updated)
	if err != nil {
		return nil, err
	}
	r.ID, r.Type, r.Status = UserID(id), UserType(typ), UserStatus(status)
	r.RegisteredAt, r.UpdatedAt = registered.Time, updated.Time
	return &r, nil
}

const getReplicaQuery = `select ` + replicaColumns + ` from referral_users where id = ?`

// getReplica returns the user's replica, or nil when there is none.
func getReplica(ctx context.Context, q querier, id UserID) (*Replica, error) {
	return scanReplicaRow(q.QueryRowContext(ctx, getReplicaQuery, string(id)))
}

// scanReplicaRow scans a query for one replica: nil when it found none.
func scanReplicaRow(row *sql.Row) (*Replica, error) {
	r, err := scanReplica(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// lockShared is the suffix of a PostgreSQL select that keeps the rows it
// found as they are until the transaction ends (see readAttachFacts).
// SQLite does not parse it and needs none.
const lockShared = ` for share`

// putReplica inserts or replaces the replica; the where clause repeats the
// version guard so an older snapshot can never overwrite a newer one. An
// update keeps the stored registered_at: the row existed, so the event is
// not the user's first version, and upsertReplica would carry the held
// value — which, on PostgreSQL, another transaction may have written after
// this one read the replica (held nil, the insert then waiting on the key).
const putReplicaQuery = `
		insert into referral_users (` + replicaColumns + `)
		values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		on conflict (id) do update set
			type = excluded.type, company_id = excluded.company_id, status = excluded.status,
			first_name = excluded.first_name, last_name = excluded.last_name, middle_name = excluded.middle_name,
			phone_number = excluded.phone_number, is_name_filled = excluded.is_name_filled,
			replica_version = excluded.replica_version, updated_at = excluded.updated_at
		where referral_users.replica_version < excluded.replica_version`

func putReplica(ctx context.Context, tx dbtx, r Replica) error {
	_, err := tx.ExecContext(ctx, putReplicaQuery,
		string(r.ID), string(r.Type), r.CompanyID, string(r.Status), r.Name.FirstName, r.Name.LastName, r.Name.MiddleName,
		r.PhoneNumber, store.Flag(r.IsNameFilled), store.TS(r.RegisteredAt), r.ReplicaVersion, store.TS(r.UpdatedAt))
	return err
}

const blockStatusQuery = `update referral_users set status = ?, replica_version = ?, updated_at = ? where id = ? and replica_version < ?`

func blockStatus(ctx context.Context, tx dbtx, r Replica) error {
	_, err := tx.ExecContext(ctx, blockStatusQuery, string(r.Status), r.ReplicaVersion, store.TS(r.UpdatedAt), string(r.ID), r.ReplicaVersion)
	return err
}

// userFactsQuery is readUserFacts' statement: the mark, the Initial entry
// and the active bond as flags, and the replica's columns. It has no join —
// SQLite compiles a prepared join on `col = ?` again on every bind — and is
// an aggregate without GROUP BY, which always returns one row: each replica
// column is max() of at most one row (id is the key), null when there is
// no replica. The Initial entry and the active bond are looked for with
// their partial index's value in the SQL text, not as a parameter: SQLite
// can use a partial index (ux_referral_registrations_initial,
// ux_referral_bonds_referred_active) for `col = ?` only by looking at the
// bound value, and then too compiles the statement again on every bind —
// every record paid a full parse and plan of its reads.
const userFactsQuery = `
		select
			exists (select 1 from referral_processed_messages where mark = ?),
			exists (select 1 from referral_registrations where referred_user_id = ? and registration_type = '` + string(RegistrationInitial) + `'),
			exists (select 1 from referral_bonds where referred_user_id = ? and status = '` + string(BondActive) + `'),
			max(id), max(type), max(company_id), max(status), max(first_name), max(last_name), max(middle_name),
			max(phone_number), max(is_name_filled), max(registered_at), max(replica_version), max(updated_at)
		from referral_users where id = ?`

const linkColumns = `id, url, owner_user_id, tenant_id, channel, created_at, deleted_at`

func scanLink(row interface{ Scan(...any) error }) (*Link, error) {
	var (
		l                  Link
		id, owner          string
		created, deletedAt store.Timestamp
	)
	if err := row.Scan(&id, &l.URL, &owner, &l.TenantID, &l.Channel, &created, &deletedAt); err != nil {
		return nil, err
	}
	l.ID, l.OwnerUserID, l.CreatedAt, l.DeletedAt = LinkID(id), UserID(owner), created.Time, deletedAt.Time
	return &l, nil
}

const liveLinkByURLQuery = `select ` + linkColumns + ` from referral_links where url = ? and deleted_at is null`

// scanLinkRow scans a query for one link: nil when it found none (for
// liveLinkByURLQuery, guard G1).
func scanLinkRow(row *sql.Row) (*Link, error) {
	l, err := scanLink(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return l, err
}

const (
	insertBondQuery = `
		insert into referral_bonds (id, referred_user_id, referrer_user_id, referral_link_id, tenant_id,
			bound_at, applied_rule, status, registration_id, created_at, traceparent)
		values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		on conflict do nothing`
	insertRegistrationQuery = `
		insert into referral_registrations (id, referred_user_id, registration_type, applied_rule, lead_requested,
			link_url, referrer_user_id, tenant_id, registered_at, bond_id, created_at)
		values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		on conflict do nothing`
	deleteBondQuery = `delete from referral_bonds where id = ?`
)

// insertBond writes b unless a unique index (one active bond per referred
// user) already holds another; won tells which.
func insertBond(ctx context.Context, tx dbtx, b Bond) (won bool, err error) {
	res, err := tx.ExecContext(ctx, insertBondQuery, string(b.ID), string(b.ReferredUserID), string(b.ReferrerUserID), string(b.ReferralLinkID), b.TenantID,
		store.TS(b.BoundAt), string(b.AppliedRule), string(b.Status), string(b.RegistrationID), store.TS(b.CreatedAt),
		telemetry.Traceparent(ctx))
	return affectedOne(res, err)
}

// insertRegistration writes r unless a unique index (one Initial entry per
// referred user) already holds another; won tells which.
func insertRegistration(ctx context.Context, tx dbtx, r Registration) (won bool, err error) {
	res, err := tx.ExecContext(ctx, insertRegistrationQuery, string(r.ID), string(r.ReferredUserID), string(r.RegistrationType), string(r.AppliedRule), store.Flag(r.LeadRequested),
		r.LinkURL, string(r.ReferrerUserID), r.TenantID, store.TS(r.RegisteredAt), string(r.BondID), store.TS(r.CreatedAt))
	return affectedOne(res, err)
}

func affectedOne(res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
