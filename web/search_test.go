package web_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/omni"
	"switchyard/referral"
	"switchyard/store/storetest"
	"switchyard/telemetry"
	"switchyard/web"
)

// The console's search: the items every wired owner finds, in time order,
// each with its trace — its span tree when the ring keeps it, its bare id
// otherwise.
func TestSearchPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	ob := backend.NewOutbox(backend.OutboxOpts{DB: db})
	ref, err := referral.New(ctx, referral.Opts{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	ring := telemetry.NewRing(64)
	// A provider of the test's own feeds the ring, so no process-wide
	// tracing is installed: the emit's row keeps the traceparent of ctx.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ring))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("search-test")

	actx, action := tracer.Start(ctx, "POST /admin/api/users/{uid}/wallet", trace.WithAttributes(attribute.String("telegram_id", "7001")))
	traced, err := ob.Emit(actx, backend.NewEvent{Type: contract.EventWalletConnected, Target: backend.Target{TelegramID: "7001"},
		Payload: json.RawMessage(`{"addr":"EQ1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	_, inner := tracer.Start(actx, "store.tx")
	inner.SetStatus(codes.Error, "rolled back")
	inner.End()
	action.End()
	kept := action.SpanContext().TraceID().String()
	// An event whose trace the ring does not keep (another process's).
	const gone = "4bf92f3577b34da6a3ce929d0e0e4736"
	goneCtx := trace.ContextWithRemoteSpanContext(ctx, mustParse(t, "00-"+gone+"-00f067aa0ba902b7-01"))
	untraced, err := ob.Emit(goneCtx, backend.NewEvent{Type: contract.EventNewPartner, Target: backend.Target{TelegramID: "7001"},
		Payload: json.RawMessage(`{"partnerName":"Ann Secret"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Ack(ctx, contract.AckRequest{ProcessedIDs: []contract.EventID{traced}}); err != nil {
		t.Fatal(err)
	}

	opts := web.Options{DB: db, Outbox: ob, Traces: ring}
	opts.History = append(opts.History, ob, ref, omni.NewAdmin(omni.AdminOpts{DB: db}))
	c := newConsole(t, opts)
	search := func(t *testing.T, q string) *goquery.Document {
		t.Helper()
		return c.get(t, "/admin/search?q="+url.QueryEscape(q), http.StatusOK)
	}

	t.Run("every page has the search box, a labelled GET form", func(t *testing.T) {
		for _, path := range []string{"/admin", "/admin/bot", "/admin/search"} {
			doc := c.get(t, path, http.StatusOK)
			form := tid(doc, "search-form")
			if form.AttrOr("method", "") != "get" || form.AttrOr("action", "") != "/admin/search" ||
				form.Find(`label[for="search-q"]`).Length() != 1 || form.Find(`input#search-q[name="q"]`).Length() != 1 {
				t.Fatalf("%s: search form %q", path, trimmed(form))
			}
		}
	})

	t.Run("a Telegram id finds its events and acks in time order, each with its trace", func(t *testing.T) {
		doc := search(t, "7001")
		var kinds []string
		tid(doc, "search-item").Each(func(_ int, s *goquery.Selection) { kinds = append(kinds, s.AttrOr("data-kind", "")) })
		want := []string{"outbox event emitted", "outbox event emitted", "acked"}
		if strings.Join(kinds, ",") != strings.Join(want, ",") {
			t.Fatalf("kinds %q, want %q", kinds, want)
		}
		if strings.Contains(doc.Text(), "Ann Secret") {
			t.Fatal("the page shows a name from a payload")
		}
		first := tid(doc, "search-item").First()
		if a := first.Find(`[data-testid="item-summary"] a`); a.AttrOr("href", "") != "/admin/bot/events/"+strconv.FormatInt(int64(traced), 10) {
			t.Fatalf("the first item links to %q", a.AttrOr("href", ""))
		}
		if a := first.Find(`[data-testid="item-trace"] a`); a.AttrOr("href", "") != "/admin/traces/"+kept {
			t.Fatalf("the kept trace links to %q: %q", a.AttrOr("href", ""), trimmed(first))
		}
		second := tid(doc, "search-item").Eq(1)
		if got := trimmed(second.Find(`[data-testid="item-trace"]`)); !strings.Contains(got, gone) || !strings.Contains(got, "collector") ||
			second.Find(`[data-testid="item-trace"] a`).Length() != 0 {
			t.Fatalf("the trace not kept shows %q", got)
		}
		if !strings.Contains(trimmed(second), strconv.FormatInt(int64(untraced), 10)) {
			t.Fatalf("the second item %q", trimmed(second))
		}
		if got := tid(doc, "search-naming").Find("a").AttrOr("href", ""); got != "/admin/traces/"+kept {
			t.Fatalf("the kept trace naming 7001 links to %q", got)
		}
	})

	t.Run("a trace id shows its span tree and what recorded it", func(t *testing.T) {
		doc := search(t, kept)
		tree := tid(doc, "search-trace")
		names := tree.Find(`[data-testid="span-name"]`).Map(func(_ int, s *goquery.Selection) string { return trimmed(s) })
		if strings.Join(names, ",") != "POST /admin/api/users/{uid}/wallet,store.tx" {
			t.Fatalf("spans %q", names)
		}
		if tree.Find(`[data-testid="span"] [data-testid="span"]`).Length() != 1 {
			t.Fatal("store.tx is not under its parent")
		}
		if got := trimmed(tree.Find(`.badge.bad[data-testid="span-status"]`)); got != "error: rolled back" {
			t.Fatalf("the failed span's status shows %q", got)
		}
		if got := tid(doc, "search-item").AttrOr("data-kind", ""); got != "outbox event emitted" {
			t.Fatalf("the trace finds %q", got)
		}
	})

	t.Run("the trace page shows a kept trace, and says when it is not kept", func(t *testing.T) {
		doc := c.get(t, "/admin/traces/"+kept, http.StatusOK)
		if tid(doc, "span").Length() != 2 {
			t.Fatalf("trace page: %q", trimmed(doc.Find("main")))
		}
		doc = c.get(t, "/admin/traces/"+gone, http.StatusOK)
		if got := trimmed(tid(doc, "trace-missing")); !strings.Contains(got, gone) || !strings.Contains(got, "collector") {
			t.Fatalf("a trace not kept: %q", got)
		}
		for _, bad := range []string{strings.ToUpper(kept), kept[:31], "00000000000000000000000000000000"} {
			c.get(t, "/admin/traces/"+bad, http.StatusNotFound)
		}
	})

	t.Run("an empty, unknown or malformed term answers that nothing was found", func(t *testing.T) {
		if doc := c.get(t, "/admin/search", http.StatusOK); tid(doc, "search-empty").Length() != 1 || tid(doc, "search-item").Length() != 0 {
			t.Fatal("the search page without a term does not invite one")
		}
		if doc := search(t, "  "); tid(doc, "search-nothing").Length() != 1 || tid(doc, "search-item").Length() != 0 {
			t.Fatal("an empty search does not say nothing was found")
		}
		for _, q := range []string{"424242", "no such thing", strings.ToUpper(kept), kept[:31], strings.Repeat("9", 500)} {
			doc := search(t, q)
			if tid(doc, "search-nothing").Length() != 1 || tid(doc, "search-item").Length() != 0 {
				t.Errorf("%q: %q", q, trimmed(doc.Find("main")))
			}
		}
	})

	t.Run("a long history is cut at the limit, the most recent kept, and says so", func(t *testing.T) {
		var first, last contract.EventID
		if err := db.Tx(ctx, func(tx *sql.Tx) error {
			for i := range 201 {
				id, err := ob.EmitTx(ctx, tx, backend.NewEvent{Type: contract.EventReactivation, Target: backend.Target{TelegramID: "7009"}})
				if err != nil {
					return err
				}
				if i == 0 {
					first = id
				}
				last = id
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		doc := search(t, "7009")
		if n := tid(doc, "search-item").Length(); n != 200 || tid(doc, "search-cut").Length() != 1 {
			t.Fatalf("%d items shown, cut notice %q", n, trimmed(tid(doc, "search-cut")))
		}
		link := func(id contract.EventID) int {
			return doc.Find(`[data-testid="search-results"] a[href="/admin/bot/events/` + strconv.FormatInt(int64(id), 10) + `"]`).Length()
		}
		if link(last) != 1 || link(first) != 0 {
			t.Fatalf("the newest event shows %d times, the oldest %d times", link(last), link(first))
		}
		if doc := search(t, "7001"); tid(doc, "search-cut").Length() != 0 {
			t.Fatal("a short history says it was cut")
		}
	})

	t.Run("the search needs a session", func(t *testing.T) {
		resp, err := http.Get(c.base + "/admin/search?q=7001")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Request.URL.Path != "/admin/login" {
			t.Fatalf("without a session, landed on %s", resp.Request.URL)
		}
	})
}

func mustParse(t *testing.T, traceparent string) trace.SpanContext {
	t.Helper()
	sc, ok := telemetry.Parse(traceparent)
	if !ok {
		t.Fatalf("parse %s", traceparent)
	}
	return sc
}
