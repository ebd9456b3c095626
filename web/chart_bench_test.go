package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"switchyard/referral"
	"switchyard/referral/referraltest"
	"switchyard/rollup"
	"switchyard/rollup/rolluptest"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/web"
)

// BenchmarkOverviewChart measures one live refresh of the Overview with its
// charts at 1 h and at 7 d, on a database whose referral consumer took
// 100,800 identity events over the last week (ten a minute): from the
// rollups of that week, and — for comparison — at 7 d with no rollups,
// where the chart counts each hour's bar at the owner:
//
//	go test -run '^$' -bench BenchmarkOverviewChart -benchtime 50x ./web/
func BenchmarkOverviewChart(b *testing.B) {
	for _, bc := range []struct {
		name, rng string
		rollups   bool
	}{
		{"1h/rollups", "1h", true},
		{"7d/rollups", "7d", true},
		{"7d/no-rollups", "7d", false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			db := storetest.NewWith(b, store.Options{Synchronous: store.SyncNormal})
			ref, err := referral.New(context.Background(), referral.Opts{DB: db})
			if err != nil {
				b.Fatal(err)
			}
			seedWeek(b, db, bc.rollups)
			h := web.New(web.Options{DB: db, AdminToken: adminToken, Referral: ref})
			cookie := sessionCookie(b, h)
			b.ResetTimer()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/admin?range="+bc.rng, nil)
				req.Header.Set("HX-Request", "true")
				req.AddCookie(cookie)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `data-testid="chart-referral"`) {
					b.Fatalf("status %d", rec.Code)
				}
			}
		})
	}
}

// seedWeek writes ten identity events a minute for the last week, and with
// rollups their rollups up to two minutes ago, as the rollup worker leaves
// them.
func seedWeek(b *testing.B, db *store.DB, rollups bool) {
	b.Helper()
	now := db.Now()
	start := now.Truncate(time.Minute).Add(-7 * 24 * time.Hour)
	var marks []time.Time
	minutes := map[time.Time]int64{}
	for m := start; m.Before(now); m = m.Add(time.Minute) {
		for i := range 10 {
			if at := m.Add(time.Duration(i) * 6 * time.Second); at.Before(now) {
				marks = append(marks, at)
			}
		}
		if m.Before(now.Add(-2 * time.Minute).Truncate(time.Minute)) {
			minutes[m] = 10
		}
	}
	referraltest.Marks(b, db, referral.OutcomeR1, marks...)
	if rollups {
		rolluptest.Minutes(b, db, rollup.IdentityConsumed, minutes)
		rolluptest.Minutes(b, db, rollup.BondsCreated, minutes)
	}
}
