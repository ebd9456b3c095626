package alerts

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// root is the repository's root, from this package's folder.
const root = ".."

// TestRulesFileIsCurrent: the committed rules file is what Rules renders,
// so its thresholds are the ones Check decides by.
func TestRulesFileIsCurrent(t *testing.T) {
	t.Parallel()
	committed, err := os.ReadFile(filepath.Join(root, RulesFilePath))
	if err != nil {
		t.Fatal(err)
	}
	if want := RulesFile(RunbookDir); !bytes.Equal(committed, want) {
		t.Fatalf("%s differs from what alerts.Rules renders: run `go generate ./alerts` and commit it.\n--- want ---\n%s", RulesFilePath, want)
	}
}

// TestRunbooks: every rule links a runbook that exists and is about it.
func TestRunbooks(t *testing.T) {
	t.Parallel()
	seen := map[Name]bool{}
	for _, r := range Rules() {
		t.Run(string(r.Alert), func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join(root, RunbookDir, r.Runbook))
			if err != nil {
				t.Fatalf("runbook of %s: %v", r.Alert, err)
			}
			if !strings.Contains(string(body), string(r.Alert)) {
				t.Errorf("%s%s does not name the alert %s", RunbookDir, r.Runbook, r.Alert)
			}
			if r.Summary == "" || r.Description == "" || r.Severity == "" {
				t.Errorf("%s lacks a summary, a description or a severity", r.Alert)
			}
		})
		seen[r.Alert] = true
	}
	for _, n := range []Name{ReferralConsumerLag, DeadLetters, OutboxDeadLetters, ReferralLinkNotFound, OutboundFailures,
		TelegramTooManyRequests, WebhookErrors, NotReady, DatabaseDiskAlmostFull} {
		if !seen[n] {
			t.Errorf("no rule for %s", n)
		}
	}
}

func fired(fs []Firing, a Name) *Firing {
	for i := range fs {
		if fs[i].Alert == a {
			return &fs[i]
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// TestCheck: each condition on either side of its threshold, as the rules
// file's unit test (docs/alerts/switchyard-rules_test.yml) puts it to
// Prometheus.
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		facts Facts
		alert Name
		want  bool
	}{
		{"a lag of exactly 5 minutes is not above it", Facts{ReferralLag: ptr(ReferralLagMax)}, ReferralConsumerLag, false},
		{"a lag a second over 5 minutes fires", Facts{ReferralLag: ptr(ReferralLagMax + time.Second)}, ReferralConsumerLag, true},
		{"no dead letter is quiet", Facts{DeadLettered: []QueueCount{{Queue: "sender.flow"}}}, DeadLetters, false},
		{"one dead letter fires", Facts{DeadLettered: []QueueCount{{Queue: "sender.flow", Count: 1}}}, DeadLetters, true},
		{"one outbox dead letter fires", Facts{OutboxDeadLettered: ptr(int64(1))}, OutboxDeadLetters, true},
		{"no outbox dead letter is quiet", Facts{OutboxDeadLettered: ptr(int64(0))}, OutboxDeadLetters, false},
		{"G1 at exactly 10% is not above it", Facts{LinkLookups: &Counts{Bad: 5, All: 50}}, ReferralLinkNotFound, false},
		{"G1 above 10% fires", Facts{LinkLookups: &Counts{Bad: 6, All: 50}}, ReferralLinkNotFound, true},
		{"4 G1s alone are fewer than 5", Facts{LinkLookups: &Counts{Bad: 4, All: 4}}, ReferralLinkNotFound, false},
		{"no lookups are quiet", Facts{LinkLookups: &Counts{}}, ReferralLinkNotFound, false},
		{"delivery failures at exactly 10% are not above it", Facts{Counters: &CounterFacts{Outbound: Counts{Bad: 5, All: 50}}}, OutboundFailures, false},
		{"delivery failures above 10% fire", Facts{Counters: &CounterFacts{Outbound: Counts{Bad: 5, All: 45}}}, OutboundFailures, true},
		{"4 failed deliveries alone are fewer than 5", Facts{Counters: &CounterFacts{Outbound: Counts{Bad: 4, All: 4}}}, OutboundFailures, false},
		{"one 429 fires", Facts{Counters: &CounterFacts{TooManyRequests: map[string]float64{"7": 1}}}, TelegramTooManyRequests, true},
		{"no 429 is quiet", Facts{Counters: &CounterFacts{TooManyRequests: map[string]float64{"7": 0}}}, TelegramTooManyRequests, false},
		{"webhook 5xx at exactly 5% are not above it", Facts{Counters: &CounterFacts{Webhooks: map[string]Counts{"/webhooks/telegram": {Bad: 3, All: 60}}}}, WebhookErrors, false},
		{"webhook 5xx above 5% fire", Facts{Counters: &CounterFacts{Webhooks: map[string]Counts{"/webhooks/telegram": {Bad: 3, All: 59}}}}, WebhookErrors, true},
		{"2 webhook 5xx alone are fewer than 3", Facts{Counters: &CounterFacts{Webhooks: map[string]Counts{"/webhooks/bot": {Bad: 2, All: 2}}}}, WebhookErrors, false},
		{"a ready instance is quiet", Facts{Readiness: &Readiness{Ready: true}}, NotReady, false},
		{"an instance not ready fires", Facts{Readiness: &Readiness{Reason: "database is not writable"}}, NotReady, true},
		{"exactly 10% of the disk available is not below it", Facts{Disk: &Disk{Available: 10, Size: 100}}, DatabaseDiskAlmostFull, false},
		{"9% of the disk available fires", Facts{Disk: &Disk{Available: 9, Size: 100}}, DatabaseDiskAlmostFull, true},
		{"an unknown disk (PostgreSQL) is quiet", Facts{Disk: &Disk{}}, DatabaseDiskAlmostFull, false},
		{"nothing known, nothing fires", Facts{}, NotReady, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Check(tc.facts)
			if f := fired(got, tc.alert); (f != nil) != tc.want {
				t.Fatalf("Check(%+v) = %+v; want %s firing: %v", tc.facts, got, tc.alert, tc.want)
			}
			for _, f := range got {
				if f.Text == "" || !strings.HasPrefix(f.Runbook, RunbookDir) {
					t.Errorf("%+v: no text or no runbook", f)
				}
			}
		})
	}
}

// TestCheckOrder: critical alerts come first, and each queue, bot and
// route is its own alert.
func TestCheckOrder(t *testing.T) {
	t.Parallel()
	got := Check(Facts{
		DeadLettered: []QueueCount{{Queue: "sender.flow", Count: 2}, {Queue: "pin.identity.users.v1", Group: "referral-identity-users", Count: 1}},
		Readiness:    &Readiness{Reason: "database is not writable"},
		Counters:     &CounterFacts{TooManyRequests: map[string]float64{"2": 1, "1": 3}},
	})
	var names []string
	for _, f := range got {
		names = append(names, string(f.Alert)+" "+f.Subject)
	}
	want := []string{
		"SwitchyardNotReady ",
		"SwitchyardDeadLetters sender.flow",
		"SwitchyardDeadLetters pin.identity.users.v1 (group referral-identity-users)",
		"SwitchyardTelegramTooManyRequests bot 1",
		"SwitchyardTelegramTooManyRequests bot 2",
	}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
}
