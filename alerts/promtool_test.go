package alerts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agreement is one set of facts put to Check and, as synthetic series, to
// Prometheus running the rules file: both must decide want.
type agreement struct {
	name  string
	alert Name
	want  bool
	facts Facts
	// series are the input series, each held for the whole test: a gauge
	// at a value, or a counter rising by perMinute.
	series []synthetic
}

type synthetic struct {
	selector  string // `metric{labels}`
	value     float64
	perMinute float64 // a counter when not 0
}

// minutes is how long the synthetic series run; the rules are evaluated at
// the end, past every window and every `for`.
const minutes = 80

func gauge(selector string, v float64) synthetic { return synthetic{selector: selector, value: v} }
func counter(selector string, perMinute float64) synthetic {
	return synthetic{selector: selector, perMinute: perMinute}
}

// over is what a counter rising by perMinute rose over window.
func over(window time.Duration, perMinute float64) float64 { return perMinute * window.Minutes() }

// agreements sit on either side of every threshold, computed from the
// thresholds themselves.
func agreements() []agreement {
	lag := ReferralLagMax.Seconds()
	// Rates whose share in a window is a tenth off the threshold either way.
	above := func(share float64) (bad, good float64) { return 100 * share * 1.1, 100 * (1 - share*1.1) }
	below := func(share float64) (bad, good float64) { return 100 * share * 0.9, 100 * (1 - share*0.9) }
	var out []agreement
	for _, v := range []struct {
		age  float64
		want bool
	}{{lag, false}, {lag + 1, true}} {
		d := time.Duration(v.age * float64(time.Second))
		out = append(out, agreement{fmt.Sprintf("referral lag of %gs", v.age), ReferralConsumerLag, v.want,
			Facts{ReferralLag: &d},
			[]synthetic{gauge(`switchyard_referral_consumer_lag_seconds{instance="a"}`, v.age)}})
	}
	for _, rate := range []float64{0, 0.1} {
		n := over(DeadLetterWindow, rate)
		out = append(out,
			agreement{fmt.Sprintf("%g dead letters a minute", rate), DeadLetters, rate > 0,
				Facts{DeadLettered: []QueueCount{{Queue: "sender.flow", Count: int64(n)}}},
				[]synthetic{counter(`switchyard_queue_messages_dead_lettered_total{queue="sender.flow",group=""}`, rate)}},
			agreement{fmt.Sprintf("%g outbox dead letters a minute", rate), OutboxDeadLetters, rate > 0,
				Facts{OutboxDeadLettered: ptr(int64(n))},
				[]synthetic{counter(`switchyard_bot_outbox_acked_events_total{outcome="dead_letter"}`, rate),
					counter(`switchyard_bot_outbox_acked_events_total{outcome="processed"}`, 10)}})
	}
	ratios := []struct {
		name     string
		alert    Name
		r        ratio
		bad, all string // selectors of one bad and one good series
		facts    func(Counts) Facts
	}{
		{"G1", ReferralLinkNotFound, linkNotFoundRatio,
			`switchyard_referral_attach_outcomes_total{outcome="G1"}`, `switchyard_referral_attach_outcomes_total{outcome="R1"}`,
			func(c Counts) Facts { return Facts{LinkLookups: &c} }},
		{"chat delivery failures", OutboundFailures, outboundRatio,
			`switchyard_omni_outbound_sends_total{outcome="retry"}`, `switchyard_omni_outbound_sends_total{outcome="sent"}`,
			func(c Counts) Facts { return Facts{Counters: &CounterFacts{Outbound: c}} }},
		{"webhook 5xx", WebhookErrors, webhookRatio,
			`switchyard_http_requests_total{route="/webhooks/telegram",method="POST",code="503"}`,
			`switchyard_http_requests_total{route="/webhooks/telegram",method="POST",code="200"}`,
			func(c Counts) Facts {
				return Facts{Counters: &CounterFacts{Webhooks: map[string]Counts{"/webhooks/telegram": c}}}
			}},
	}
	for _, r := range ratios {
		for _, v := range []struct {
			label     string
			bad, good float64
			want      bool
		}{
			{"a tenth above the share", 0, 0, true},
			{"a tenth below the share", 0, 0, false},
			{"every event bad, but fewer than the least number", r.r.minBad * 0.8 / r.r.window.Minutes(), 0, false},
			{"every event bad, a few more than the least number", r.r.minBad * 1.2 / r.r.window.Minutes(), 0, true},
		} {
			switch v.label {
			case "a tenth above the share":
				v.bad, v.good = above(r.r.maxShare)
			case "a tenth below the share":
				v.bad, v.good = below(r.r.maxShare)
			}
			bad, good := over(r.r.window, v.bad), over(r.r.window, v.good)
			out = append(out, agreement{r.name + ": " + v.label, r.alert, v.want, r.facts(Counts{Bad: bad, All: bad + good}),
				[]synthetic{counter(r.bad, v.bad), counter(r.all, v.good)}})
		}
	}
	for _, rate := range []float64{0, 0.1} {
		out = append(out, agreement{fmt.Sprintf("%g 429s a minute", rate), TelegramTooManyRequests, rate > 0,
			Facts{Counters: &CounterFacts{TooManyRequests: map[string]float64{"7": over(TooManyRequestsWindow, rate)}}},
			[]synthetic{counter(`switchyard_telegram_too_many_requests_total{bot="7"}`, rate)}})
	}
	for _, ready := range []bool{true, false} {
		v := 0.0
		if ready {
			v = 1
		}
		out = append(out, agreement{fmt.Sprintf("ready %v", ready), NotReady, !ready,
			Facts{Readiness: &Readiness{Ready: ready, Reason: "database is not writable"}},
			[]synthetic{gauge(`switchyard_store_ready{instance="a"}`, v)}})
	}
	const size = 1_000_000_000
	for _, v := range []struct {
		available float64
		want      bool
	}{{size * DiskAvailableShareMin, false}, {size*DiskAvailableShareMin - 4096, true}, {0, true}} {
		out = append(out, agreement{fmt.Sprintf("%.0f of %d bytes available", v.available, size), DatabaseDiskAlmostFull, v.want,
			Facts{Disk: &Disk{Available: int64(v.available), Size: size}},
			[]synthetic{gauge(`switchyard_store_filesystem_available_bytes{instance="a"}`, v.available),
				gauge(`switchyard_store_filesystem_size_bytes{instance="a"}`, size)}})
	}
	return out
}

// TestRulesAgreeWithCheck: Prometheus, evaluating the rules file, and Check
// decide alike, on either side of every threshold: the rules file and the
// console's warnings use the same numbers the same way. It needs promtool
// (Debian's prometheus package; .ci/run installs it).
func TestRulesAgreeWithCheck(t *testing.T) {
	t.Parallel()
	cases := agreements()
	for _, a := range cases {
		if got := fired(Check(a.facts), a.alert) != nil; got != a.want {
			t.Errorf("Check, %s: %s firing %v, want %v (facts %+v)", a.name, a.alert, got, a.want, a.facts)
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install prometheus); .ci/run installs it")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), RulesFile(RunbookDir), 0o600); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n")
	for _, a := range cases {
		fmt.Fprintf(&b, "  - name: %q\n    interval: 1m\n    input_series:\n", a.name)
		for _, s := range a.series {
			values := fmt.Sprintf("%gx%d", s.value, minutes)
			if s.perMinute != 0 {
				values = fmt.Sprintf("0+%gx%d", s.perMinute, minutes)
			}
			fmt.Fprintf(&b, "      - series: %q\n        values: %q\n", s.selector, values)
		}
		fmt.Fprintf(&b, "    promql_expr_test:\n      - expr: 'count(ALERTS{alertname=%q,alertstate=\"firing\"})'\n        eval_time: %dm\n",
			string(a.alert), minutes)
		if a.want {
			b.WriteString("        exp_samples: [{value: 1}]\n")
		} else {
			b.WriteString("        exp_samples: []\n")
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "agree_test.yml"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "agree_test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Prometheus decides otherwise than Check (%v):\n%s\n--- the test ---\n%s", err, out, b.String())
	}
}
