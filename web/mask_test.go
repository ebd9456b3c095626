package web

import (
	"regexp"
	"strings"
	"testing"

	"github.com/mymmrac/telego"

	"switchyard/bot/onboarding"
	"switchyard/omni"
	"switchyard/queue"
	"switchyard/telegram/fakebot"
)

// TestConsoleMasksEveryPhoneSpelling puts phone numbers, spelled as people
// type them, through every view model that shows free text, and checks the
// console shows none of them with more than its last four digits — while the
// Telegram ids it shows as ids stay whole.
func TestConsoleMasksEveryPhoneSpelling(t *testing.T) {
	t.Parallel()
	digits := regexp.MustCompile(`\D`)
	views := map[string]func(text string) string{
		"the inbox preview": func(s string) string {
			return toThreadRow(omniThread(), omni.ThreadDigest{LastText: s, LastDirection: "inbound"}, testNow).LastText
		},
		"a thread's message and its failure": func(s string) string {
			row := toMessageRow(omni.OmniMessage{Text: s, Status: omni.StatusFailed, FailureReason: "telegram 400: " + s}, testNow)
			return row.Text + " " + row.Detail
		},
		"a dead letter's error and body": func(s string) string {
			rows := toDeadRows([]queue.DeadLetter{{LastError: "permanent: " + s, Body: []byte(`{"text":"` + s + `","chat_id":5550001001}`)}})
			return rows[0].LastError + " " + rows[0].Body
		},
		"an outgoing bot message and its error": func(s string) string {
			row := toOutgoingRow(onboarding.DM{Text: s, LastError: s, Status: onboarding.DMFailed})
			return row.Text + " " + row.LastError
		},
		"a sandbox chat": func(s string) string {
			c := toSandboxChat("inbox", fakebot.ChatView{ID: 5550001001, User: telego.User{ID: 5550001001},
				Messages: []fakebot.MessageView{{ID: 1, Text: s}}})
			return c.Messages[0].Text
		},
		"a payload that is not JSON": func(s string) string { return prettyPayload([]byte("note: " + s)) },
		"a funnel value":             func(s string) string { return valueText(&s) },
	}
	for _, phone := range []string{"89161112244", "8 (916) 111-22-33", "8-916-111-22-33", "8 916 111 22 33",
		"916.111.22.33", "(916)1112233", "9161112233", "+7 999 123-45-67", "+79161112233", "+44 20 7946 0958"} {
		d := digits.ReplaceAllString(phone, "")
		for name, view := range views {
			got := view("Перезвоните: " + phone + ", спасибо")
			if strings.Contains(digits.ReplaceAllString(got, ""), d[1:len(d)-3]) {
				t.Errorf("%s shows %q as %q", name, phone, got)
			}
			if !strings.Contains(got, "***"+d[len(d)-4:]) {
				t.Errorf("%s shows %q as %q, without its masked form", name, phone, got)
			}
		}
	}

	t.Run("ids shown as ids stay whole", func(t *testing.T) {
		t.Parallel()
		c := toSandboxChat("inbox", fakebot.ChatView{ID: 5550001001, User: telego.User{ID: 5550001001}})
		if c.UserID != "5550001001" {
			t.Errorf("the sandbox shows the user id as %q", c.UserID)
		}
		if p := prettyPayload([]byte(`{"chat_id":5550001001,"telegramId":"5550001002","uid":12,"message":{"date":1736942400}}`)); !strings.Contains(p, "5550001001") ||
			!strings.Contains(p, `"5550001002"`) || !strings.Contains(p, `"date": 1736942400`) {
			t.Errorf("the payload's ids or times are masked:\n%s", p)
		}
		if p := prettyPayload([]byte(`{"contact":89161112244,"PhoneNumber":"8 (916) 111-22-33"}`)); strings.Contains(p, "9161112244") ||
			!strings.Contains(p, `"contact": "***2244"`) || !strings.Contains(p, `"PhoneNumber": "***2233"`) {
			t.Errorf("a phone number as a JSON number or under a phone key is shown:\n%s", p)
		}
	})
}
