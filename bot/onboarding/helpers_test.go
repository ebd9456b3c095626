package onboarding

import (
	"context"
	"database/sql"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
)

// backendTestSecret is BOT_TO_BACKEND_SECRET of the tests' backends.
const backendTestSecret = "s3cret-shared-with-the-bot-0123456789"

// emitMany writes n events of one target in one transaction.
func emitMany(t testing.TB, o *backend.Outbox, n int, target backend.Target) []contract.EventID {
	t.Helper()
	ids := make([]contract.EventID, 0, n)
	err := o.Tx(context.Background(), func(tx *sql.Tx) error {
		ids = ids[:0] // a transaction run again (PostgreSQL) starts over
		for range n {
			id, err := o.EmitTx(context.Background(), tx, backend.NewEvent{Type: contract.EventStatusNftActivated, Target: target, Payload: json.RawMessage(`{"level":"lp1"}`)})
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func eventIDs(events []contract.Event) []contract.EventID {
	ids := make([]contract.EventID, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

func itoa[T ~int64](n T) string { return strconv.FormatInt(int64(n), 10) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
