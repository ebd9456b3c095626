package cli

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/PuerkitoBio/goquery"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/omni/omnitest"
	"switchyard/queue/queuetest"
	"switchyard/rollup"
	"switchyard/store"
	"switchyard/web"
)

// The console at size (issue 20): every console page and every live-refresh
// fragment answers in under 50 ms at p95 with 1,000,000 bot outbox events,
// 200,000 chat threads and 100,000 dead letters in the database.
//
//	go test -run '^$' -bench BenchmarkConsoleAtSize -benchtime 40x -timeout 60m .
//
// The first run seeds the database (a few minutes) into a file kept under
// the temporary folder (atSizeDB) and reuses it afterwards; delete the file
// to seed again. SWITCHYARD_BENCH_SCALE=0.01 seeds and measures a hundredth
// of the rows (a quick check of the benchmark itself).

// consolePage is one console page the benchmark requests.
type consolePage struct {
	// route is the page's route template, as the console's router names it.
	route string
	// path is the URL requested: the route with real ids and, for a list,
	// a filter.
	path string
}

// consolePages are the console's pages with the ids of the seeded database.
// Every GET route of the console must have at least one entry: the
// benchmark fails on a route it does not request, so a new page joins the
// table.
func consolePages(s atSizeSeed) []consolePage {
	return []consolePage{
		{"/admin", "/admin"},
		{"/admin/", "/admin/"},
		{"/admin/bot", "/admin/bot"},
		{"/admin/bot", "/admin/bot?state=pending"},
		{"/admin/bot", "/admin/bot?state=retrying"},
		{"/admin/bot", "/admin/bot?state=processed"},
		{"/admin/bot", "/admin/bot?state=dead"},
		{"/admin/bot", "/admin/bot?type=registered"},
		{"/admin/bot", "/admin/bot?user=" + s.telegramID},
		{"/admin/bot", "/admin/bot?before=" + s.middleEvent},
		{"/admin/bot/events/{id:[0-9]+}", "/admin/bot/events/" + s.middleEvent},
		{"/admin/bot/funnel", "/admin/bot/funnel"},
		{"/admin/bot/users/{tg:[0-9]+}", "/admin/bot/users/" + s.telegramID},
		{"/admin/referral", "/admin/referral"},
		{"/admin/referral/links", "/admin/referral/links"},
		{"/admin/referral/replicas", "/admin/referral/replicas"},
		{"/admin/referral/users", "/admin/referral/users?id=11111111-1111-4111-8111-111111111111"},
		{"/admin/referral/users/{id}", "/admin/referral/users/11111111-1111-4111-8111-111111111111"},
		{"/admin/chat", "/admin/chat"},
		{"/admin/chat", "/admin/chat?state=open"},
		{"/admin/chat", "/admin/chat?state=closed"},
		{"/admin/chat/threads/{id:[0-9]+}", "/admin/chat/threads/" + s.middleThread},
		{"/admin/search", "/admin/search?q=" + s.telegramID},
		{"/admin/traces/{id}", "/admin/traces/4bf92f3577b34da6a3ce929d0e0e4736"},
		{"/admin/queues", "/admin/queues"},
		{"/admin/queues/{queue}", "/admin/queues/" + atSizeDeadQueue},
		{"/admin/queues/{queue}", s.deadOlder},
		{"/admin/queues/{queue}", s.deadLast},
		{"/admin/queues/{queue}/dead/{id}", s.deadPage},
		{"/admin/sandbox", "/admin/sandbox"},
	}
}

// atSize are the rows of the benchmark's database.
var atSize = struct{ events, threads, dead int }{1_000_000, 200_000, 100_000}

// atSizeDeadQueue is the queue whose dead letters are seeded.
const atSizeDeadQueue = "bench.failing"

// atSizeSeed is what the pages' URLs need of the seeded database.
type atSizeSeed struct {
	middleEvent, middleThread, telegramID string
	// The queue page's links: its second window, its last window, and the
	// newest dead letter's page (the ids are the seed's, read back).
	deadOlder, deadLast, deadPage string
}

func BenchmarkConsoleAtSize(b *testing.B) {
	ctx := context.Background()
	scale := 1.0
	if v := os.Getenv("SWITCHYARD_BENCH_SCALE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1 {
			b.Fatalf("SWITCHYARD_BENCH_SCALE=%q: want a number in (0, 1]", v)
		}
		scale = f
	}
	events, threads, dead := int(float64(atSize.events)*scale), int(float64(atSize.threads)*scale), int(float64(atSize.dead)*scale)
	path := atSizeDB(b, events, threads, dead)
	seed := atSizeSeed{
		middleEvent:  strconv.Itoa(events / 2),
		middleThread: strconv.Itoa(threads / 2),
		telegramID:   strconv.Itoa(atSizeTelegramID(events / 2)),
	}

	cfg, err := parseConfig("serve", []string{"--db", path, "--sync", "NORMAL"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	db, err := openStore(ctx, cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	if _, err := db.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	sec, err := loadSecrets(ctx, db, cfg)
	if err != nil {
		b.Fatal(err)
	}
	a, err := wire(ctx, cfg, db, sec, log, urls{self: "http://127.0.0.1:1", public: "http://127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(a.close)
	// The charts read per-minute rollups, which a running instance's rollup
	// job keeps current (the benchmark runs no workers): roll up once, as
	// the job would have.
	for _, w := range a.workers {
		if ru, ok := w.(*rollup.Rollups); ok {
			n, err := ru.RollUp(ctx, db.Now())
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("rolled up %d minutes", n)
		}
	}
	cookie := atSizeLogin(b, a.handler, sec.AdminToken)
	seed.deadOlder, seed.deadLast, seed.deadPage = atSizeQueueLinks(b, a.handler, cookie)

	pages := consolePages(seed)
	checkEveryConsolePage(b, a.handler, pages)
	for _, pg := range pages {
		for _, live := range []bool{false, true} {
			name := strings.TrimPrefix(strings.TrimPrefix(pg.path, "/admin"), "/")
			if name == "" {
				name = "overview" + strings.TrimPrefix(pg.path, "/admin")
			}
			if live {
				name += "/live"
			}
			b.Run(name, func(b *testing.B) {
				var (
					took   []time.Duration
					status int
					size   int
				)
				for b.Loop() {
					req := httptest.NewRequest(http.MethodGet, pg.path, nil)
					req.AddCookie(cookie)
					if live {
						req.Header.Set("HX-Request", "true")
					}
					rec := httptest.NewRecorder()
					start := time.Now()
					a.handler.ServeHTTP(rec, req)
					took = append(took, time.Since(start))
					if rec.Code >= 500 {
						b.Fatalf("GET %s: status %d\n%.500s", pg.path, rec.Code, rec.Body.String())
					}
					status, size = rec.Code, rec.Body.Len()
				}
				b.ReportMetric(float64(size)/1024, "KB")
				if status != http.StatusOK {
					b.Logf("GET %s answers %d", pg.path, status)
				}
				p50, p95 := percentile(took, 50), percentile(took, 95)
				b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(p95.Microseconds())/1000, "p95-ms")
				b.ReportMetric(0, "ns/op") // the percentiles say it
			})
		}
	}
}

// atSizeQueueLinks reads the seeded queue's page for the addresses of its
// second and last windows of dead letters and of its newest dead letter.
func atSizeQueueLinks(b *testing.B, h http.Handler, cookie *http.Cookie) (older, last, dead string) {
	b.Helper()
	req := httptest.NewRequest(http.MethodGet, "/admin/queues/"+atSizeDeadQueue, nil)
	req.AddCookie(cookie)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	doc, err := goquery.NewDocumentFromReader(rec.Body)
	if err != nil {
		b.Fatal(err)
	}
	href := func(testid string) string {
		v, ok := doc.Find(`[data-testid="` + testid + `"]`).First().Attr("href")
		if !ok {
			b.Fatalf("the queue page has no %s link", testid)
		}
		return v
	}
	return href("dead-pager-older"), href("dead-pager-last"), href("dead-link")
}

// percentile is the p-th percentile of took (nearest rank).
func percentile(took []time.Duration, p int) time.Duration {
	if len(took) == 0 {
		return 0
	}
	s := slices.Clone(took)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

// checkEveryConsolePage fails the benchmark for a GET route of the console
// that pages does not request.
func checkEveryConsolePage(b *testing.B, h http.Handler, pages []consolePage) {
	b.Helper()
	srv, ok := h.(*web.Server)
	if !ok {
		b.Fatalf("the app's handler is a %T, not a *web.Server", h)
	}
	covered := map[string]bool{}
	for _, p := range pages {
		covered[p.route] = true
	}
	err := srv.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tmpl, err := route.GetPathTemplate()
		if err != nil || route.GetHandler() == nil {
			return nil
		}
		methods, err := route.GetMethods()
		if err != nil || !slices.Contains(methods, http.MethodGet) || !strings.HasPrefix(tmpl, "/admin") {
			return nil
		}
		if strings.HasPrefix(tmpl, "/admin/api") || strings.HasPrefix(tmpl, "/admin/login") || strings.HasPrefix(tmpl, "/admin/logout") {
			return nil
		}
		if !covered[tmpl] {
			b.Errorf("console page %s is not in consolePages: add it, with the ids of the seeded database", tmpl)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

func atSizeLogin(b *testing.B, h http.Handler, token string) *http.Cookie {
	b.Helper()
	req := httptest.NewRequest(http.MethodPost, "/admin/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
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

// atSizeTelegramID is the Telegram id of the i-th seeded event: 100,000
// users share the events.
func atSizeTelegramID(i int) int { return 700_000_000 + i%100_000 }

// atSizeDB returns the seeded database file for these counts, seeding it on
// the first run: a file under the temporary folder, named by the counts and
// the seed's version, written beside and renamed when complete so that an
// interrupted seed is never used.
func atSizeDB(b *testing.B, events, threads, dead int) string {
	b.Helper()
	const version = 2 // bump when the seed changes
	dir := filepath.Join(os.TempDir(), "switchyard-bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("console-at-size-v%d-%d-%d-%d.db", version, events, threads, dead))
	if _, err := os.Stat(path); err == nil {
		b.Logf("using the seeded database %s", path)
		return path
	}
	partial := path + ".partial"
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(partial + suffix)
	}
	start := time.Now()
	db, err := store.Open(context.Background(), store.Options{Path: partial, Synchronous: store.SyncNormal})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	seedAtSize(b, db, events, threads, dead)
	if _, err := db.Write.Exec(`pragma wal_checkpoint(truncate)`); err != nil {
		b.Fatal(err)
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	_ = os.Remove(partial + "-wal")
	_ = os.Remove(partial + "-shm")
	if err := os.Rename(partial, path); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %s in %s", path, time.Since(start).Round(time.Second))
	return path
}

// seedAtSize writes the benchmark's rows: events outbox events through the
// outbox (one transaction; then acked in batches: all but the newest 0.5%
// processed, a few hundred of those left retrying), threads chat threads and
// dead dead letters through the owners' test kits.
func seedAtSize(b *testing.B, db *store.DB, events, threads, dead int) {
	b.Helper()
	ctx := context.Background()
	ob := backend.NewOutbox(backend.OutboxOpts{DB: db})
	types := []contract.EventType{contract.EventWalletConnected, contract.EventRegistered, contract.EventNewPartner}
	ids := make([]contract.EventID, 0, events)
	start := time.Now()
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		ids = ids[:0]
		for i := range events {
			id, err := ob.EmitTx(ctx, tx, backend.NewEvent{Type: types[i%len(types)],
				Target: backend.Target{TelegramID: contract.TelegramID(strconv.Itoa(atSizeTelegramID(i)))}})
			if err != nil {
				return err
			}
			ids = append(ids, id)
			if (i+1)%100_000 == 0 {
				b.Logf("seed: %d/%d outbox events (%s)", i+1, events, time.Since(start).Round(time.Second))
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	pending := events / 200
	acked := ids[:len(ids)-pending]
	retry := ids[len(ids)-pending:][:min(pending, 500)]
	for done := 0; done < len(acked); {
		k := min(len(acked)-done, 10_000)
		if _, err := ob.Ack(ctx, contract.AckRequest{ProcessedIDs: acked[done : done+k]}); err != nil {
			b.Fatal(err)
		}
		done += k
		if done%100_000 == 0 || done == len(acked) {
			b.Logf("seed: %d/%d events acked (%s)", done, len(acked), time.Since(start).Round(time.Second))
		}
	}
	errs := map[string]string{}
	for _, id := range retry {
		errs[strconv.FormatInt(int64(id), 10)] = "telegram: 502 Bad Gateway"
	}
	if _, err := ob.Ack(ctx, contract.AckRequest{RetryIDs: retry, Errors: errs}); err != nil {
		b.Fatal(err)
	}
	now := db.Now()
	omnitest.Threads(b, db, "bench-", threads, now)
	b.Logf("seed: %d chat threads (%s)", threads, time.Since(start).Round(time.Second))
	if _, err := queuetest.SeedDead(ctx, db, queuetest.DeadOpts{Queue: atSizeDeadQueue, N: dead,
		Start: now.Add(-time.Duration(dead) * time.Millisecond),
		Body:  func(int) []byte { return []byte(`{"chat_id":5550001001,"text":"Your status NFT is active"}`) },
	}); err != nil {
		b.Fatal(err)
	}
	b.Logf("seed: %d dead letters (%s)", dead, time.Since(start).Round(time.Second))
}
