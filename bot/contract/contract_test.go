package contract

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"switchyard/metrictest"
)

func TestErrorStatusTable(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for err, s := range codes {
		if s.status < 400 || s.code == "" || seen[s.code] {
			t.Fatalf("%v: status %d code %q (codes must be unique)", err, s.status, s.code)
		}
		seen[s.code] = true
	}
	for _, err := range []Error{ErrUserNotFound, ErrLeaderNotFound, ErrEventNotFound, ErrEventProcessed, ErrLinkTaken,
		ErrTelegramTaken, ErrAccountBound, ErrNoPreview, ErrAlreadyRegistered, ErrTokenNotFound, ErrTokenExpired,
		ErrTokenUsed, ErrUnauthorized} {
		if _, ok := codes[err]; !ok {
			t.Fatalf("%q has no status", err)
		}
		_, code, _ := err.Status()
		if back, ok := ErrorOfCode(code); !ok || back != err {
			t.Fatalf("code %q maps back to %q, want %q", code, back, err)
		}
	}
}

func TestParseTelegramID(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"1", "42", "9007199254740993", "9223372036854775807"} {
		if got, err := ParseTelegramID(s); err != nil || string(got) != s {
			t.Errorf("%q: %q, %v; want it accepted as it is", s, got, err)
		}
	}
	// The document's pattern is ^[1-9][0-9]{0,18}$ within int64: nothing else.
	for _, s := range []string{"", "0", "-1", "+1", "01", " 1", "1 ", "1.0", "1e3", "0x10", "9223372036854775808", "99999999999999999999", "１"} {
		if got, err := ParseTelegramID(s); err == nil {
			t.Errorf("%q accepted as %q", s, got)
		}
	}
	t.Run("JSON reads a string or an integer in canonical form", func(t *testing.T) {
		for raw, want := range map[string]TelegramID{`"42"`: "42", `42`: "42", `null`: "", `9223372036854775807`: "9223372036854775807"} {
			var got TelegramID
			if err := json.Unmarshal([]byte(raw), &got); err != nil || got != want {
				t.Errorf("%s: %q, %v; want %q", raw, got, err, want)
			}
		}
		for _, raw := range []string{`"+42"`, `" 42"`, `"042"`, `42.0`, `4.2e1`, `-42`, `0`, `true`, `{}`} {
			var got TelegramID
			if err := json.Unmarshal([]byte(raw), &got); err == nil {
				t.Errorf("%s accepted as %q", raw, got)
			}
		}
	})
}

// TestEventTypesAreListed: every EventType constant is in EventTypes, the
// list the metrics' series and the validation are made from.
func TestEventTypesAreListed(t *testing.T) {
	t.Parallel()
	consts := metrictest.Constants(t, "contract.go", "EventType")
	if len(consts) != len(EventTypes) {
		t.Errorf("%d EventType constants, %d in EventTypes", len(consts), len(EventTypes))
	}
	for name, v := range consts {
		if !slices.Contains(EventTypes, EventType(v)) {
			t.Errorf("%s (%q) is not in EventTypes", name, v)
		}
	}
}

// TestImports keeps the arrows of bot/ pointing one way: the contract is a
// leaf (of the project it imports only the JSON error leaf), and the two
// halves it connects import it and never each other — the onboarding bot
// reaches the backend over HTTP only. It reads `go list -deps`, the
// compiler's own view of the imports.
func TestImports(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the packages' imports")
	}
	deps := func(t *testing.T, pkg string) []string {
		t.Helper()
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		var own []string
		for _, p := range strings.Fields(string(out)) {
			if strings.HasPrefix(p, "switchyard/") && p != pkg {
				own = append(own, p)
			}
		}
		return own
	}
	for _, c := range []struct {
		pkg       string
		forbidden []string // packages and the trees under them
		only      []string // when set, the only project packages allowed
	}{
		{pkg: "switchyard/bot/contract", only: []string{"switchyard/httpjson"}},
		{pkg: "switchyard/bot/onboarding", forbidden: []string{"switchyard/bot/backend", "switchyard/web"}},
		{pkg: "switchyard/bot/backend", forbidden: []string{"switchyard/bot/onboarding", "switchyard/web"}},
	} {
		t.Run(c.pkg+" imports only what it may", func(t *testing.T) {
			t.Parallel()
			got := deps(t, c.pkg)
			if !slices.Contains(got, "switchyard/bot/contract") && c.pkg != "switchyard/bot/contract" {
				t.Errorf("%s does not import the contract: %v", c.pkg, got)
			}
			for _, p := range got {
				for _, f := range c.forbidden {
					if p == f || strings.HasPrefix(p, f+"/") {
						t.Errorf("%s imports %s", c.pkg, p)
					}
				}
				if c.only != nil && !slices.Contains(c.only, p) {
					t.Errorf("%s imports %s; the contract imports only %v of the project", c.pkg, p, c.only)
				}
			}
		})
	}
}

// TestEventTraceparentIsOptional: the traceparent came to the contract after
// its first version, so an event without one is written exactly as before
// (no key), and an answer without the key reads as before.
func TestEventTraceparentIsOptional(t *testing.T) {
	t.Parallel()
	tg := TelegramID("42")
	ev := Event{ID: 7, EventType: EventRegistered, TelegramID: &tg, Payload: json.RawMessage(`null`)}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "traceparent") {
		t.Fatalf("an event without a trace is written with the key: %s", b)
	}
	var back Event
	if err := json.Unmarshal(b, &back); err != nil || back.Traceparent != "" || back.ID != 7 {
		t.Fatalf("read back %+v, %v", back, err)
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if err := json.Unmarshal([]byte(`{"id":8,"eventType":"registered","telegramId":"42","magnetUid":null,"payload":null,`+
		`"createdAt":"2026-01-15T12:00:00.000000Z","attempts":0,"traceparent":"`+tp+`"}`), &back); err != nil || back.Traceparent != tp {
		t.Fatalf("read %+v, %v; want the traceparent", back, err)
	}
}
