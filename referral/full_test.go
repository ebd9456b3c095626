package referral

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

func TestFullDatabase(t *testing.T) {
	t.Parallel()

	t.Run("the consumer group commits nothing it could not write, charges no attempt for it, and consumes every event once once room is back", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		logs := &testwait.Buffer{}
		svc, err := New(context.Background(), Opts{DB: db, Logger: slog.New(slog.NewTextHandler(logs, nil)),
			Retry: queue.RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		h := &harness{t: t, db: db, svc: svc, logs: logs}
		const n = 60
		for i := range n {
			user := uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprint("full-", i))).String()
			h.publish(identityEvent(fmt.Sprintf("full-%03d", i), string(TypeUserUpserted), user,
				`{"UserId":"`+user+`","Type":"Investor","Status":"Active","Name":{"FirstName":"`+strings.Repeat("Н", 100)+
					`"},"PhoneNumber":"+79990000000","RegisteredVia":"Sms","Version":1}`))
		}
		makeRoom := storetest.FillUp(t, db, false)
		h.start()
		t.Cleanup(h.stop)
		testwait.Until(t, 20*time.Second, "the consumers to meet the full database", func() bool {
			return strings.Count(logs.String(), "database or disk is full") >= 3
		})

		// A record is finished only with its replica and its mark written;
		// none was charged an attempt or dead-lettered for the full disk,
		// which is no fault of its own (the retry policy allows three).
		marks, replicas := h.count(`select count(*) from referral_processed_messages`), h.count(`select count(*) from referral_users`)
		if marks != replicas || marks == n {
			t.Fatalf("while full: %d marks, %d replicas of %d events", marks, replicas, n)
		}
		if r, d := h.count(`select count(*) from queue_group_retries`), len(h.dead()); r != 0 || d != 0 {
			t.Fatalf("while full: %d records charged a failed attempt, %d dead-lettered", r, d)
		}

		makeRoom()
		h.waitIdle()
		if m, r, d := h.count(`select count(*) from referral_processed_messages`), h.count(`select count(*) from referral_users`), len(h.dead()); m != n || r != n || d != 0 {
			t.Fatalf("once room is back: %d marks, %d replicas, %d dead letters for %d events", m, r, d, n)
		}
		t.Logf("while full: %d of %d consumed; all %d once after", marks, n, n)
	})
}
