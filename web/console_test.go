package web

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/a-h/templ"

	"switchyard/omni"
	"switchyard/referral"
	"switchyard/rollup"
)

// Component tests: render a templ component with a view model and query the
// HTML by data-testid, as templ's testing guide does.

func render(t *testing.T, c templ.Component) *goquery.Document {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatalf("render: %v", err)
	}
	doc, err := goquery.NewDocumentFromReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func byID(doc *goquery.Document, id string) *goquery.Selection {
	return doc.Find(`[data-testid="` + id + `"]`)
}

func text(s *goquery.Selection) string { return strings.TrimSpace(s.Text()) }

var testNow = time.Date(2026, 1, 15, 12, 30, 20, 0, time.UTC)

func TestLayout(t *testing.T) {
	t.Parallel()
	t.Run("the sandbox entry shows only when the sandbox runs", func(t *testing.T) {
		doc := render(t, messagePage(page{Title: "T", Active: "chat"}, "x"))
		if byID(doc, "nav-sandbox").Length() != 0 {
			t.Fatal("Sandbox is in the nav without a sandbox")
		}
		doc = render(t, messagePage(page{Title: "T", Active: "sandbox", Sandbox: true}, "x"))
		if got, _ := byID(doc, "nav-sandbox").Attr("aria-current"); got != "page" {
			t.Fatalf("the Sandbox entry is not current: %q", got)
		}
	})
	t.Run("a flash message shows with its kind", func(t *testing.T) {
		doc := render(t, messagePage(page{Title: "T", Flash: &flash{OK: false, Text: "no such event"}}, "x"))
		f := byID(doc, "flash")
		if text(f) != "no such event" || !f.HasClass("bad") || f.AttrOr("role", "") != "alert" {
			t.Fatalf("flash = %q classes %q", text(f), f.AttrOr("class", ""))
		}
	})
	t.Run("the live switch is hidden until the script shows it", func(t *testing.T) {
		doc := render(t, messagePage(page{Title: "T"}, "x"))
		sw := byID(doc, "live-toggle")
		if _, hidden := sw.Attr("hidden"); !hidden || sw.Find("input#live-toggle").Length() != 1 {
			t.Fatal("the live switch should be a hidden labelled checkbox without JavaScript")
		}
	})
	t.Run("a live region polls its own page and renders alone as a fragment", func(t *testing.T) {
		p := page{Title: "Queues", Self: "/admin/queues?x=1"}
		c := queuesPage(p, queuesModel{Wired: true, Queues: []queueRow{{Name: "sender.flow", Ready: 2}}})
		doc := render(t, c)
		region := byID(doc, "queues-live")
		if region.AttrOr("hx-get", "") != "/admin/queues?x=1" || !strings.Contains(region.AttrOr("hx-trigger", ""), "every 2s") {
			t.Fatalf("live region hx-get %q trigger %q", region.AttrOr("hx-get", ""), region.AttrOr("hx-trigger", ""))
		}
		var buf bytes.Buffer
		if err := templ.RenderFragments(context.Background(), &buf, c, liveFragment); err != nil {
			t.Fatal(err)
		}
		frag := buf.String()
		if strings.Contains(frag, "<html") || strings.Contains(frag, "<nav") || !strings.Contains(frag, `data-testid="queue-sender.flow"`) {
			t.Fatalf("the fragment is not just the live region:\n%s", frag)
		}
	})
}

func TestConfirmAction(t *testing.T) {
	t.Parallel()
	doc := render(t, confirmAction("Redrive", "Redrive event 7?", "/admin/bot/events/7/redrive",
		[]formField{{"back", "/admin/bot?state=dead"}}, "redrive"))
	d := byID(doc, "redrive")
	if goquery.NodeName(d) != "details" {
		t.Fatalf("the action is a %s, want a details disclosure", goquery.NodeName(d))
	}
	form := d.Find("form")
	if form.AttrOr("method", "") != "post" || form.AttrOr("action", "") != "/admin/bot/events/7/redrive" {
		t.Fatalf("form method %q action %q", form.AttrOr("method", ""), form.AttrOr("action", ""))
	}
	if form.Find(`input[name="confirm"][value="yes"]`).Length() != 1 || form.Find(`input[name="back"][value="/admin/bot?state=dead"]`).Length() != 1 {
		t.Fatal("the confirming form lacks confirm=yes or its back field")
	}
	if !strings.Contains(text(d), "Redrive event 7?") || text(byID(doc, "redrive-confirm")) != "Yes, redrive" {
		t.Fatalf("question or button wrong: %q", text(d))
	}
}

func TestOverviewComponent(t *testing.T) {
	t.Parallel()
	rg := chartRanges[0]
	handled := make([]rollup.Bucket, rg.N)
	handled[rg.N-1] = rollup.Bucket{Sum: 12, Peak: 12}
	handled[rg.N-11] = rollup.Bucket{Sum: 3, Peak: 3}
	m := overviewModel{
		Bot: botSummary{Pending: 4, Retrying: 2, Dead: 1, PerMinute: 12,
			Chart: buildChart(chartSpec{Testid: "chart-bot", Title: "handled", Range: rg, From: rg.from(testNow),
				Stack: []chartSeries{{Label: "handled", Class: "s1", Buckets: handled}}, Peaks: []chartSeries{{Buckets: handled}}})},
		Referral: referralSummary{Lag: 9, Bonds: 30, DLQ: 0, OldestAge: 2 * time.Minute},
		Chat:     chatSummary{Open: 3, Failed: 2, InboundPerMin: 5, OutPerMin: 6},
		Queues:   []queueRow{{Name: "sender.flow", Ready: 1, Delayed: 2, Dead: 3, OldestAge: 1500 * time.Millisecond}},
	}
	doc := render(t, overviewPage(page{Title: "Overview"}, m))
	for id, want := range map[string]string{
		"bot-pending": "4", "bot-retrying": "2", "bot-dead": "1", "bot-per-minute": "12",
		"referral-lag": "9", "referral-bonds": "30", "referral-dlq": "0",
		"chat-open": "3", "chat-failed": "2", "chat-in-per-minute": "5", "chat-out-per-minute": "6",
	} {
		if got := text(byID(doc, id)); got != want {
			t.Errorf("%s = %q, want %q", id, got, want)
		}
	}
	for _, id := range []string{"bot-dead", "chat-failed", "referral-lag"} {
		if !byID(doc, id).HasClass("bad") {
			t.Errorf("%s does not stand out", id)
		}
	}
	if byID(doc, "referral-dlq").HasClass("bad") {
		t.Error("an empty DLQ stands out")
	}
	q := byID(doc, "queue-sender.flow")
	if text(q.Find(`[data-testid="depth"]`)) != "3" || text(q.Find(`[data-testid="oldest"]`)) != "2s" || !q.Find(`[data-testid="dead"]`).HasClass("bad") {
		t.Fatalf("queue row: %q", text(q))
	}
	for _, link := range []string{"/admin/bot", "/admin/referral", "/admin/chat", "/admin/queues"} {
		if doc.Find(`main a[href="`+link+`"]`).Length() == 0 {
			t.Errorf("the overview does not link to %s", link)
		}
	}

	t.Run("the chart draws a bar per minute scaled to its value axis", func(t *testing.T) {
		svg := byID(doc, "chart-bot").Find("svg")
		if !strings.Contains(svg.AttrOr("aria-label", ""), "peak 12/min, 15 in all") {
			t.Fatalf("chart label %q", svg.AttrOr("aria-label", ""))
		}
		if n := svg.Find("g.bar-g").Length(); n != rg.N {
			t.Fatalf("%d bars, want %d", n, rg.N)
		}
		bars := svg.Find("rect.bar")
		if bars.Length() != 2 {
			t.Fatalf("%d drawn bars, want 2", bars.Length())
		}
		// The value axis runs to 20 (the nice number above 12) over 132 units.
		if h := bars.Last().AttrOr("height", ""); h != "79.2" {
			t.Fatalf("the bar of 12 is %s high, want 12/20 of 132", h)
		}
		if h := bars.First().AttrOr("height", ""); h != "19.8" {
			t.Fatalf("the bar of 3 is %s high, want 3/20 of 132", h)
		}
	})
}

func TestEventTable(t *testing.T) {
	t.Parallel()
	rows := []eventRow{
		{ID: "7", Href: "/admin/bot/events/7", Type: "registered", User: "uid 5", UserHref: "/admin/bot?user=uid:5", State: "dead", Attempts: 10, LastError: "502"},
		{ID: "8", Href: "/admin/bot/events/8", Type: "new_partner", User: "—", State: "retrying", Attempts: 2, Due: "2026-01-15 12:34:00 (in 4m)"},
	}
	doc := render(t, eventTable(rows, ""))
	dead := byID(doc, "event-7")
	if !dead.Find(`[data-testid="state"]`).HasClass("dead") || !strings.Contains(text(dead), "502") {
		t.Fatalf("dead row: %q", text(dead))
	}
	if dead.Find(`a[href="/admin/bot/events/7"]`).Length() != 1 || dead.Find(`a[href="/admin/bot?user=uid:5"]`).Length() != 1 {
		t.Fatal("the row does not link to the event and its user")
	}
	if !strings.Contains(text(byID(doc, "event-8")), "in 4m") {
		t.Fatalf("a retrying event does not show its next retry: %q", text(byID(doc, "event-8")))
	}
	doc = render(t, eventTable(nil, ""))
	if !strings.Contains(text(byID(doc, "event-table")), "No events match.") {
		t.Fatal("an empty list says nothing")
	}
}

func TestThreadComponent(t *testing.T) {
	t.Parallel()
	m := threadModel{
		Thread: threadRow{ID: "4", Contact: "Boris", Channel: "Telegram Business", State: "open"},
		Messages: []messageRow{
			{ID: "1", Text: "hi", Status: "received"},
			{ID: "2", Outbound: true, Text: "hello", Status: "sent", Origin: "operator"},
			{ID: "3", Outbound: true, Text: "again", Status: "failed", Failed: true, Detail: "blocked by the user"},
		},
		MaxRunes: 4096, Self: "/admin/chat/threads/4",
	}
	doc := render(t, threadPage(page{Title: "Boris"}, m))
	if text(byID(doc, "msg-2").Find(`[data-testid="status"]`)) != "sent" {
		t.Fatal("an outbound message does not show its status")
	}
	if byID(doc, "msg-1").Find(`[data-testid="status"]`).Length() != 0 {
		t.Fatal("an inbound message shows a delivery status")
	}
	failed := byID(doc, "msg-3")
	if !failed.HasClass("failed") || text(failed.Find(`[data-testid="delivery-detail"]`)) != "blocked by the user" {
		t.Fatalf("a failed delivery does not stand out with its reason: %q", text(failed))
	}
	form := byID(doc, "reply-form")
	if form.AttrOr("action", "") != "/admin/chat/threads/4/reply" || form.Find(`label[for="reply-text"]`).Length() != 1 ||
		form.Find(`textarea#reply-text[maxlength="4096"]`).Length() != 1 {
		t.Fatal("the reply box is not a labelled form posting to the thread")
	}
	if byID(doc, "reply-form").Closest(".live").Length() != 0 {
		t.Fatal("the reply box is inside the live region, so a refresh would wipe a draft")
	}
}

func TestInboxComponent(t *testing.T) {
	t.Parallel()
	th := toThreadRow(omniThread(), omni.ThreadDigest{LastText: "call me at +79991234567", LastDirection: "inbound", Failed: 2}, testNow)
	doc := render(t, inboxPage(page{Title: "Chat"}, inboxModel{Wired: true, Threads: []threadRow{th}}))
	row := byID(doc, "thread-9")
	if !row.HasClass("unread") || !row.HasClass("bad-edge") || text(row.Find(`[data-testid="unread"]`)) != "3 unread" ||
		text(row.Find(`[data-testid="failed"]`)) != "2 failed" {
		t.Fatalf("inbox row: %q classes %q", text(row), row.AttrOr("class", ""))
	}
	if s := text(row); strings.Contains(s, "1234567") || !strings.Contains(s, "+7***4567") || !strings.Contains(s, "Bob") {
		t.Fatalf("the preview shows a phone number or lacks the contact: %q", s)
	}
}

func TestPrettyPayload(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, want string
	}{
		{"keys keep their order and nesting is indented", `{"b":1,"a":{"c":[1,2],"d":{}},"e":[]}`,
			"{\n  \"b\": 1,\n  \"a\": {\n    \"c\": [\n      1,\n      2\n    ],\n    \"d\": {}\n  },\n  \"e\": []\n}"},
		{"a phone field is masked", `{"PhoneNumber":"+79991231234"}`, "{\n  \"PhoneNumber\": \"+7***1234\"\n}"},
		{"a phone in free text is masked", `{"text":"ring +7 999 123-12-34 now"}`, "{\n  \"text\": \"ring +7***1234 now\"\n}"},
		{"a secret field is hidden", `{"webhookSecret":"s3cr3t","token":"abc"}`, "{\n  \"webhookSecret\": \"•••\",\n  \"token\": \"•••\"\n}"},
		{"text that is not JSON is shown masked", `phone +79991231234`, "phone +7***1234"},
		{"an empty payload is a dash", ``, "—"},
		{"null is a dash", `null`, "—"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := prettyPayload([]byte(c.in)); got != c.want {
				t.Fatalf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestReplicaTableMasksPhones(t *testing.T) {
	t.Parallel()
	doc := render(t, replicaTable([]replicaRow{toReplicaRow(replicaWithPhone("+79990001234"))}))
	if got := text(doc.Find(`[data-testid="phone"]`)); got != "+7***1234" {
		t.Fatalf("phone shown as %q", got)
	}
	if strings.Contains(doc.Text(), "79990001234") {
		t.Fatal("the full phone number is on the page")
	}
}

func TestAgo(t *testing.T) {
	t.Parallel()
	cases := map[time.Duration]string{-5 * time.Second: "5s ago", -3 * time.Minute: "3m ago", 4 * time.Minute: "in 4m", -50 * time.Hour: "2d ago"}
	for d, want := range cases {
		if got := ago(testNow, testNow.Add(d)); got != want {
			t.Errorf("ago(%v) = %q, want %q", d, got, want)
		}
	}
}

func omniThread() omni.Thread {
	last := testNow.Add(-2 * time.Minute)
	return omni.Thread{
		ID: 9, Channel: omni.ChannelTelegramBusiness, State: omni.ThreadOpen, Unread: 3, LastMessageAt: &last,
		Contact: omni.Contact{Name: "Bob", ProviderUserID: "55", Reachable: true},
	}
}

func replicaWithPhone(phone string) referral.Replica {
	return referral.Replica{
		ID: "11111111-1111-4111-8111-111111111111", Type: referral.UserAgent, Status: referral.StatusActive,
		Name: referral.FullName{FirstName: "Olga"}, PhoneNumber: phone, ReplicaVersion: 2, UpdatedAt: testNow,
	}
}
