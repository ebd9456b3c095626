package omni

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
)

// TestThreadAcrossInstances writes into one thread from two instances — two
// handles of one database, each with its own chat role and admin API, as
// two processes behind a load balancer have — while a reader follows the
// thread as the console does, by GET …/messages?after=<seq>. The inbound
// messages and the operators' replies all commit (on PostgreSQL none fails
// with a unique violation, or with 25P02 after one), take the seqs 1…n with
// no gap, in commit order, so the reader, asking only for what comes after
// the last seq it saw, sees every message once.
func TestThreadAcrossInstances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db1 := storetest.New(t)
	db2 := openProcessDB(t, db1.Path())
	type instance struct {
		db     *store.DB
		domain *chatDomain
		admin  *Admin
	}
	instances := []instance{
		{db1, newChatDomain(db1, AutoAckRule{}), NewAdmin(AdminOpts{DB: db1})},
		{db2, newChatDomain(db2, AutoAckRule{}), NewAdmin(AdminOpts{DB: db2})},
	}
	apply := func(in instance, body []byte) error {
		env := envelopeOf(t, body, in.db.Now())
		return in.db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := in.domain.applyTx(ctx, tx, env)
			return err
		})
	}
	if err := apply(instances[0], update(1, "message", privateMessage(42, 1, "hello", t0))); err != nil {
		t.Fatal(err)
	}
	var thread ThreadID
	if err := db1.Read.QueryRow(`select id from omni_threads`).Scan(&thread); err != nil {
		t.Fatal(err)
	}

	// The reader follows the thread until the writers are done and it has
	// read past the last message.
	type seen struct {
		id  MessageID
		seq int64
	}
	var (
		read       []seen
		readErr    error
		writersEnd = make(chan struct{})
		readerEnd  = make(chan struct{})
	)
	go func() {
		defer close(readerEnd)
		after, done := int64(0), false
		for {
			msgs, err := instances[1].admin.ListMessages(ctx, thread, MessageFilter{AfterSeq: after})
			if err != nil {
				readErr = err
				return
			}
			for _, m := range msgs {
				read = append(read, seen{m.ID, m.Seq})
				after = m.Seq
			}
			if done && len(msgs) == 0 {
				return
			}
			select {
			case <-writersEnd:
				done = true // one more read after the last commit
			case <-time.After(time.Millisecond):
			}
		}
	}()

	const replies, inbound = 16, 8 // per instance
	errs := make(chan error, 2*(replies+inbound))
	var wg sync.WaitGroup
	for n, in := range instances {
		for i := range replies {
			wg.Go(func() {
				_, err := in.admin.Reply(ctx, thread, fmt.Sprintf("reply %d/%d", n, i))
				errs <- err
			})
		}
		for i := range inbound {
			id := 100 + 100*n + i
			wg.Go(func() {
				errs <- apply(in, update(id, "message", privateMessage(42, id, fmt.Sprintf("inbound %d/%d", n, i), t0+1)))
			})
		}
	}
	wg.Wait()
	close(writersEnd)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a write into the thread failed: %v", err)
		}
	}
	select {
	case <-readerEnd:
	case <-time.After(30 * time.Second):
		t.Fatal("the reader did not finish within 30 s of the writers")
	}
	if readErr != nil {
		t.Fatal(readErr)
	}

	total := 1 + 2*(replies+inbound)
	rows, err := db1.Read.QueryContext(ctx, `select id, seq from omni_messages where thread_id = ? order by seq`, int64(thread))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var stored []seen
	for rows.Next() {
		var s seen
		if err := rows.Scan(&s.id, &s.seq); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(stored) != total {
		t.Fatalf("%d messages in the thread, want %d", len(stored), total)
	}
	for i, s := range stored {
		if s.seq != int64(i+1) {
			t.Fatalf("seq %d at position %d: want 1 to %d with no gap", s.seq, i+1, total)
		}
	}
	if fmt.Sprint(read) != fmt.Sprint(stored) {
		t.Fatalf("the reader following ?after saw %d messages, want all %d once, in seq order:\nread   %v\nstored %v", len(read), total, read, stored)
	}
}
