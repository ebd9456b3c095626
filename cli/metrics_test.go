package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"switchyard/alerts"
	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
)

// exposition is one scrape of /metrics in the text format.
type exposition struct {
	raw    []byte
	types  map[string]string             // family name → counter, gauge, histogram…
	series map[string]map[string]float64 // sample name → its labels, rendered sorted → value
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrape reads base's /metrics.
func scrape(t *testing.T, base string) exposition {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	e := exposition{raw: raw, types: map[string]string{}, series: map[string]map[string]float64{}}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			e.types[f[2]] = f[3]
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		var pairs []string
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			pairs = append(pairs, p[1]+"="+p[2])
		}
		if e.series[m[1]] == nil {
			e.series[m[1]] = map[string]float64{}
		}
		e.series[m[1]][labelKey(pairs...)] = v
	}
	return e
}

// labelKey renders name=value pairs in one order.
func labelKey(pairs ...string) string {
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}

// wantSeries is a metric whose series must exist at start: one per value of
// the cross product of its dimensions.
type wantSeries struct {
	name string
	dims []dim
}

type dim struct {
	label  string
	values []string
}

func (w wantSeries) keys() []string {
	keys := [][]string{nil}
	for _, d := range w.dims {
		var next [][]string
		for _, k := range keys {
			for _, v := range d.values {
				next = append(next, append(slices.Clone(k), d.label+"="+v))
			}
		}
		keys = next
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = labelKey(k...)
	}
	return out
}

// check lists the series of want that e lacks, and those that are not 0.
func (e exposition) check(want []wantSeries) (missing, nonzero []string) {
	for _, w := range want {
		sample := w.name
		if e.types[w.name] == "histogram" {
			sample += "_count"
		}
		for _, k := range w.keys() {
			v, ok := e.series[sample][k]
			switch {
			case !ok:
				missing = append(missing, fmt.Sprintf("%s{%s}", sample, k))
			case v != 0:
				nonzero = append(nonzero, fmt.Sprintf("%s{%s} %v", sample, k, v))
			}
		}
	}
	return missing, nonzero
}

// The label values an alert may read, as the specs and the docs name them:
// each must have its series, at 0, in a process that has done nothing yet.
var (
	queues        = []string{"receiver.flow", "receiver.retry", "sender.flow", "sender.retry"}
	topics        = []string{"pin.identity.users.v1", "pin.referral.bonds.v1", "pin.referral.lead-attachments.v1"}
	botEventTypes = []string{"wallet_connected", "registered", "new_partner", "status_nft_activated", "reactivation", "struct_overtake"}
	chatEvents    = []string{"message.created", "message.edited", "message.deleted", "connection.updated", "membership.updated", "callback.received", "unknown"}
	referralTypes = []string{"pin.identity.user-upserted", "pin.identity.user-blocked", "other"}

	seriesAtStart = []wantSeries{
		{"switchyard_referral_attach_outcomes_total", []dim{{"outcome", []string{"R1", "G1", "G2", "G3", "G4", "G5", "first-seen-skip", "replica-only", "invalid-slug", "race-lost"}}}},
		{"switchyard_referral_dead_lettered_total", []dim{{"reason", []string{"bad-payload", "owner-replica-missing", "transient"}}}},
		{"switchyard_referral_retries_total", []dim{{"reason", []string{"owner-replica-missing", "transient"}}}},
		{"switchyard_referral_consumed_messages_total", []dim{{"type", referralTypes}, {"result", []string{"ok", "duplicate", "ignored", "retry", "dead"}}}},
		{"switchyard_referral_processing_duration_seconds", []dim{{"type", referralTypes}, {"result", []string{"ok", "duplicate", "ignored", "retry", "dead"}}}},
		{"switchyard_referral_duplicates_total", []dim{{"type", referralTypes}}},
		{"switchyard_referral_replica_writes_total", []dim{{"type", referralTypes[:2]}, {"result", []string{"applied", "stale"}}}},

		{"switchyard_queue_messages_sent_total", []dim{{"queue", append(slices.Clone(queues), topics...)}}},
		{"switchyard_queue_duplicates_suppressed_total", []dim{{"queue", queues}}},
		{"switchyard_queue_messages_received_total", []dim{{"queue", queues}, {"group", []string{""}}}},
		{"switchyard_queue_messages_succeeded_total", []dim{{"queue", queues}, {"group", []string{""}}}},
		{"switchyard_queue_messages_retried_total", []dim{{"queue", queues}, {"group", []string{""}}}},
		{"switchyard_queue_messages_dead_lettered_total", []dim{{"queue", queues}, {"group", []string{""}}}},
		{"switchyard_queue_handler_duration_seconds", []dim{{"queue", queues}, {"group", []string{""}}}},
		{"switchyard_queue_messages_received_total", []dim{{"queue", topics[:1]}, {"group", []string{"referral-identity-users"}}}},
		{"switchyard_queue_messages_succeeded_total", []dim{{"queue", topics[:1]}, {"group", []string{"referral-identity-users"}}}},
		{"switchyard_queue_messages_retried_total", []dim{{"queue", topics[:1]}, {"group", []string{"referral-identity-users"}}}},
		{"switchyard_queue_messages_dead_lettered_total", []dim{{"queue", topics[:1]}, {"group", []string{"referral-identity-users"}}}},
		{"switchyard_queue_handler_duration_seconds", []dim{{"queue", topics[:1]}, {"group", []string{"referral-identity-users"}}}},

		{"switchyard_omni_chat_events_total", []dim{{"event_type", chatEvents}, {"outcome", []string{"applied", "duplicate", "ignored", "retry", "dead"}}}},
		{"switchyard_omni_chat_events_total", []dim{{"event_type", []string{"invalid"}}, {"outcome", []string{"dead"}}}},
		{"switchyard_omni_outbound_sends_total", []dim{{"outcome", []string{"sent", "duplicate", "rate_limited", "retry", "failed", "refused", "deferred"}}}},
		{"switchyard_omni_lane_moves_total", []dim{{"lane", []string{"receiver", "sender"}}}},
		{"switchyard_omni_webhook_updates_total", []dim{{"outcome", []string{"accepted", "duplicate", "unauthorized", "throttled", "bad_request", "unavailable", "client_gone"}}}},
		{"switchyard_omni_updates_ignored_total", []dim{{"reason", []string{"group_chat", "unused_update_type", "unknown_update_type", "stale_edit", "no_thread", "no_messages", "stale_connection", "membership_unchanged"}}}},

		{"switchyard_bot_outbox_emitted_events_total", []dim{{"event_type", botEventTypes}}},
		{"switchyard_bot_outbox_acked_events_total", []dim{{"outcome", []string{"processed", "retry", "dead_letter", "closed"}}}},
		{"switchyard_bot_onboarding_events_total", []dim{{"event_type", botEventTypes}, {"outcome", []string{"handled", "duplicate", "retry"}}}},
		{"switchyard_bot_onboarding_updates_total", []dim{{"kind", []string{"message", "callback_query", "my_chat_member", "other"}}, {"outcome", []string{"received", "duplicate", "handled", "retry", "failed"}}}},
		{"switchyard_bot_onboarding_messages_total", []dim{{"method", []string{"sendMessage", "editMessageReplyMarkup", "answerCallbackQuery"}}, {"outcome", []string{"sent", "retry", "fallback", "notified", "failed"}}}},

		{"switchyard_store_tx_retries_total", []dim{{"reason", []string{"serialization", "deadlock"}}}},
		{"switchyard_telegram_ratelimit_deferrals_total", []dim{{"scope", []string{"chat", "group", "bot", "pause"}}}},
		{"switchyard_telegram_too_many_requests_total", []dim{{"bot", []string{"7300000001", "7300000002"}}}},
		{"switchyard_http_requests_total", []dim{{"route", []string{"/webhooks/telegram"}}, {"method", []string{"POST"}}, {"code", []string{"500", "503"}}}},
		{"switchyard_auth_failures_total", []dim{{"surface", []string{"console-login", "admin-api", "bot-api", "bot-webhook", "omni-webhook"}}}},
		{"switchyard_auth_throttled_total", []dim{{"surface", []string{"console-login", "admin-api", "bot-api", "bot-webhook", "omni-webhook"}}}},
	}
)

// units are the name endings that say what a switchyard metric counts or
// measures (Prometheus naming: base units, plural; _total for counters).
var units = []string{"_total", "_seconds", "_bytes", "_messages", "_requests", "_connections"}

// states are the gauges that are 0 or 1, unitless like Prometheus's own up.
var states = []string{"switchyard_store_ready"}

// TestMetricsAtStart starts `switchyard serve` with every role, both bots on
// a fake Bot API (so nothing is seeded and nothing happens), and scrapes
// /metrics: every label value an alert may read has its series at 0, not
// "no data"; every name carries its unit; promtool finds nothing to say.
func TestMetricsAtStart(t *testing.T) {
	t.Parallel()
	fake := fakebot.New(fakebot.Opts{})
	tg := httptest.NewServer(fake)
	t.Cleanup(func() { tg.Close(); fake.Close() })
	p := start(t, storetest.Source(t),
		"BOT_TELEGRAM_TOKEN="+fakebot.Token(7300000001), "OMNI_TELEGRAM_TOKEN="+fakebot.Token(7300000002), "TELEGRAM_API_URL="+tg.URL)
	waitHealthy(t, p.base)

	// The workers declare theirs as they start, right after the banner.
	var e exposition
	var missing, nonzero []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		e = scrape(t, p.base)
		if missing, nonzero = e.check(seriesAtStart); len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	t.Run("every known label value has its series at 0", func(t *testing.T) {
		if len(missing) > 0 {
			t.Errorf("%d series missing 30 s after start:\n%s", len(missing), strings.Join(missing, "\n"))
		}
		if len(nonzero) > 0 {
			t.Errorf("series not 0 in a process that did nothing:\n%s", strings.Join(nonzero, "\n"))
		}
	})

	t.Run("every name ends in its unit, counters in _total and only they", func(t *testing.T) {
		n := 0
		for name, typ := range e.types {
			if !strings.HasPrefix(name, "switchyard_") {
				continue
			}
			n++
			if !slices.Contains(states, name) && !slices.ContainsFunc(units, func(u string) bool { return strings.HasSuffix(name, u) }) {
				t.Errorf("%s (%s) ends in none of the units %v", name, typ, units)
			}
			if total := strings.HasSuffix(name, "_total"); total != (typ == "counter") {
				t.Errorf("%s is a %s; _total is for counters, and every counter", name, typ)
			}
		}
		if n == 0 {
			t.Fatalf("no switchyard metrics in:\n%s", e.raw)
		}
	})

	t.Run("every series an alert rule reads exists", func(t *testing.T) {
		for _, sr := range alerts.SeriesRead() {
			if _, ok := e.types[sr.Metric]; !ok {
				t.Errorf("%s: no family %s", sr, sr.Metric)
				continue
			}
			matching := 0
			for key := range e.series[sr.Metric] {
				if seriesMatches(key, sr.Match) {
					matching++
				}
			}
			if matching == 0 {
				t.Errorf("%s: no series matches", sr)
			}
			for label, values := range sr.Values() {
				for _, v := range values {
					if !slices.ContainsFunc(slices.Collect(maps.Keys(e.series[sr.Metric])), func(k string) bool {
						return slices.Contains(strings.Split(k, ","), label+"="+v)
					}) {
						t.Errorf("%s: no series with %s=%q", sr, label, v)
					}
				}
			}
		}
	})

	t.Run("promtool check metrics finds nothing", func(t *testing.T) {
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			t.Skip("promtool is not installed (Debian: apt-get install prometheus); .ci/promtool-check runs it")
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(e.raw)
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	})
}

// seriesMatches reports whether the series of key (labelKey's rendering)
// has every label of match matching its expression whole, as PromQL's =~.
func seriesMatches(key string, match map[string]string) bool {
	labels := map[string]string{}
	for _, p := range strings.Split(key, ",") {
		if k, v, ok := strings.Cut(p, "="); ok {
			labels[k] = v
		}
	}
	for l, re := range match {
		if !regexp.MustCompile("^(?:" + re + ")$").MatchString(labels[l]) {
			return false
		}
	}
	return true
}
