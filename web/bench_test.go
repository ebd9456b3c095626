package web_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/omni"
	"switchyard/omni/omnitest"
	"switchyard/queue"
	"switchyard/referral"
	"switchyard/referral/referraltest"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/web"
)

// BenchmarkOverviewPoll measures one live refresh of the Overview (the htmx
// fragment every open console asks for every two seconds) on a database
// that handled `rows` outbox events, identity events and chat messages in
// the last 30 minutes, against the same request on an empty database in the
// same run:
//
//	go test -run '^$' -bench BenchmarkOverviewPoll -benchtime 50x ./web/
func BenchmarkOverviewPoll(b *testing.B) {
	var baseline float64
	for _, rows := range []int{0, 10_000, 50_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			db := storetest.NewWith(b, store.Options{Synchronous: store.SyncNormal})
			seedThroughput(b, db, rows)
			ref, err := referral.New(context.Background(), referral.Opts{DB: db})
			if err != nil {
				b.Fatal(err)
			}
			h := web.New(web.Options{DB: db, AdminToken: adminToken, Outbox: backend.NewOutbox(backend.OutboxOpts{DB: db}),
				Queues: queue.NewAdmin(queue.AdminOpts{DB: db}), Referral: ref, Chat: omni.NewAdmin(omni.AdminOpts{DB: db})})
			cookie := sessionCookie(b, h)
			b.ResetTimer()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/admin", nil)
				req.Header.Set("HX-Request", "true")
				req.AddCookie(cookie)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "bot-per-minute") {
					b.Fatalf("status %d", rec.Code)
				}
			}
			perOp := float64(b.Elapsed().Microseconds()) / float64(b.N)
			if rows == 0 {
				baseline = perOp
			} else if baseline > 0 {
				b.ReportMetric(perOp/baseline, "x-empty-db")
			}
		})
	}
}

func sessionCookie(b *testing.B, h http.Handler) *http.Cookie {
	b.Helper()
	req := httptest.NewRequest(http.MethodPost, "/admin/login", strings.NewReader(url.Values{"token": {adminToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	for _, c := range rec.Result().Cookies() {
		if c.Name == "switchyard_session" {
			return c
		}
	}
	b.Fatalf("login: status %d, no session cookie", rec.Code)
	return nil
}

// seedThroughput writes n handled outbox events (through the outbox), n
// consumed identity events and n chat messages over the last 30 minutes
// (through the owners' test kits).
func seedThroughput(b *testing.B, db *store.DB, n int) {
	b.Helper()
	if n == 0 {
		return
	}
	ctx := context.Background()
	ob := backend.NewOutbox(backend.OutboxOpts{DB: db})
	ids := make([]contract.EventID, 0, n)
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		for i := range n {
			id, err := ob.EmitTx(ctx, tx, backend.NewEvent{Type: contract.EventWalletConnected, Target: backend.Target{TelegramID: contract.TelegramID(fmt.Sprint(1000 + i%500))}})
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	for len(ids) > 0 {
		k := min(len(ids), 10_000)
		if _, err := ob.Ack(ctx, contract.AckRequest{ProcessedIDs: ids[:k]}); err != nil {
			b.Fatal(err)
		}
		ids = ids[k:]
	}
	now := db.Now()
	marks := make([]time.Time, n)
	msgs := make([]omnitest.Message, n)
	for i := range n {
		at := now.Add(-time.Duration(i%1800) * time.Second)
		marks[i] = at
		msgs[i] = omnitest.Message{Direction: []omni.Direction{omni.DirectionInbound, omni.DirectionOutbound}[i%2], At: at}
	}
	referraltest.Marks(b, db, referral.OutcomeR1, marks...)
	omnitest.Thread(b, db, msgs...)
}
