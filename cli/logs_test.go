package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
	"switchyard/testwait"
)

// Phone numbers the flows carry, in the forms people type them. The logs
// may show a number masked (+7***1234), never whole.
var logPhones = []string{
	"+79990001234",       // the link owner's identity event
	"+7 (999) 555-66-77", // the referred investor's identity event
	"8 916 555-12-34",    // a customer writes it to the business account
	"+7-926-000-99-88",   // in a web-cabinet notification
	"+79161112233",       // in an operator's reply
	"+7 903 444 55 66",   // shared as a contact with the onboarding bot
	// Domestic spellings, without the country code.
	"89161112244",       // a replica looked up by phone instead of by id (the path is logged)
	"8 (916) 111-22-33", // a third identity event
	"8-916-222-33-44",   // a funnel looked up by phone instead of by Telegram id
}

// logSecrets are the secrets of the logs test, each from the environment.
var logSecrets = map[string]string{
	"SWITCHYARD_ADMIN_TOKEN":      "logs-admin-SECRET-7f3a9c0e5b",
	"BOT_TO_BACKEND_SECRET":       "logs-bot2backend-SECRET-51e2d8",
	"BOT_TELEGRAM_TOKEN":          fakebot.Token(8100000001),
	"BOT_TELEGRAM_WEBHOOK_SECRET": "logsBotWebhookSECRET_9d1c",
	"OMNI_TELEGRAM_TOKEN":         fakebot.Token(8100000002),
	"OMNI_WEBHOOK_SECRET":         "logsOmniWebhookSECRET_4b7e",
}

// digitRuns are the digit sequences a leaked phone number would show: all
// its digits, and its last ten (the number without the country code).
func digitRuns(phone string) []string {
	d := regexp.MustCompile(`\D`).ReplaceAllString(phone, "")
	return []string{d, d[len(d)-10:]}
}

// checkLogs fails for every secret and every whole phone number in logs.
func checkLogs(t *testing.T, logs string, secrets map[string]string) {
	t.Helper()
	if len(logs) < 1000 {
		t.Fatalf("only %d bytes of logs: the flows did not run", len(logs))
	}
	digits := regexp.MustCompile(`\D`).ReplaceAllString(logs, "")
	for name, s := range secrets {
		parts := []string{s}
		if _, secret, ok := strings.Cut(s, ":"); ok { // a bot token: its secret half too
			parts = append(parts, secret)
		}
		for _, p := range parts {
			if i := strings.Index(logs, p); i >= 0 {
				t.Errorf("the logs show %s: …%s…", name, logs[max(0, i-200):min(len(logs), i+len(p)+50)])
			}
		}
	}
	for _, phone := range logPhones {
		d := regexp.MustCompile(`\D`).ReplaceAllString(phone, "")
		if masked := "+" + d[:1] + "***" + d[len(d)-4:]; !strings.HasPrefix(phone, "+") && strings.Contains(logs, masked) {
			t.Errorf("the logs show the domestic number %q as %q, its trunk prefix as a country code", phone, masked)
		}
		if i := strings.Index(logs, phone); i >= 0 {
			t.Errorf("the logs show the phone number %q: …%s…", phone, logs[max(0, i-200):min(len(logs), i+len(phone)+50)])
		}
		for _, run := range digitRuns(phone) {
			if strings.Contains(digits, run) {
				t.Errorf("the logs show the digits %s of the phone number %q", run, phone)
			}
		}
	}
}

// flowClient calls the app over HTTP with a credential.
type flowClient struct {
	t    *testing.T
	base string
}

func (c flowClient) call(method, path, auth string, body any, want int, out any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = strings.NewReader(string(raw))
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if want != 0 && resp.StatusCode != want {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: %s: %v", method, path, raw, err)
		}
	}
}

// runWorkers runs the app's workers until the test ends.
func runWorkers(t *testing.T, a *app) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, wk := range a.workers {
		wg.Go(func() { _ = wk.Run(ctx) })
	}
	t.Cleanup(func() {
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("the workers did not stop within 20 s")
		}
	})
}

func (w *wiredApp) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := w.db.Read.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestLogsHideSecretsAndPhones runs every flow — the bot outbox with its
// onboarding bot (Telegram webhook mode), the referral consumers, the chat
// platform in and out — through the wired app, with every secret from the
// environment, Telegram answering 429, 500 and dropped connections now and
// then, and bad input on each webhook; then reads the whole debug log.
func TestLogsHideSecretsAndPhones(t *testing.T) {
	t.Parallel()
	fake := fakebot.New(fakebot.Opts{WebhookRetryMin: 20 * time.Millisecond, WebhookRetryMax: 200 * time.Millisecond})
	fakeSrv := httptest.NewServer(fake)
	t.Cleanup(fakeSrv.Close)
	t.Cleanup(fake.Close)
	for _, f := range []fakebot.Fault{
		{Kind: fakebot.FaultTooManyRequests, Method: "sendMessage", Times: 1, RetryAfter: time.Second},
		{Kind: fakebot.FaultServerError, Method: "sendMessage", Times: 1},
		{Kind: fakebot.FaultDisconnect, Method: "sendMessage", Times: 1},
		{Kind: fakebot.FaultServerError, Method: "setWebhook", Token: logSecrets["BOT_TELEGRAM_TOKEN"], Times: 1},
	} {
		fake.AddFault(f)
	}

	env := map[string]string{"TELEGRAM_API_URL": fakeSrv.URL}
	for k, v := range logSecrets {
		env[k] = v
	}
	cfg, err := parseConfig("serve", []string{"--log-level", "debug", "--log-format", "json", "--bot-updates", "webhook"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := loadSecrets(context.Background(), storetest.New(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := newWiredApp(t, sec, env, "--bot-updates", "webhook")
	runWorkers(t, w.app)
	c := flowClient{t: t, base: w.srv.URL}
	admin, botSecret := sec.AdminToken, sec.BotToBackend
	onboarding, inbox := fake.Bot(logSecrets["BOT_TELEGRAM_TOKEN"]), fake.Bot(logSecrets["OMNI_TELEGRAM_TOKEN"])

	t.Run("bot outbox and the onboarding bot", func(t *testing.T) {
		c.t = t
		testwait.Until(t, 10*time.Second, "the onboarding bot's webhook", func() bool { return webhookSet(fake, logSecrets["BOT_TELEGRAM_TOKEN"]) })
		leaderTG, memberTG := int64(5550001001), int64(5550001002)
		var leader, member struct {
			UID int64 `json:"uid"`
		}
		c.call("POST", "/admin/api/users", admin, map[string]any{"link": "leader-olga", "name": "Olga Leader", "telegramId": fmt.Sprint(leaderTG)}, 201, &leader)
		c.call("POST", "/admin/api/users", admin, map[string]any{"link": "member-ivan", "name": "Ivan Member"}, 201, &member)
		ivan := telego.User{ID: memberTG, FirstName: "Ivan"}
		if _, err := onboarding.Start(ivan, "leader-olga"); err != nil {
			t.Fatal(err)
		}
		if _, err := onboarding.Send(ivan, "мой телефон "+logPhones[5]); err != nil {
			t.Fatal(err)
		}
		c.call("POST", fmt.Sprintf("/admin/api/users/%d/wallet", member.UID), admin, map[string]string{"addr": "EQDk2VTvn04SUKJrW7rXahzdF8_Qi6utb0wj43InCu9vdjrR"}, 200, nil)
		c.call("POST", fmt.Sprintf("/admin/api/users/%d/register", member.UID), admin, map[string]any{"leaderUid": leader.UID}, 200, nil)
		c.call("POST", fmt.Sprintf("/admin/api/users/%d/nft", leader.UID), admin, map[string]string{"level": "lp1"}, 200, nil)
		c.call("POST", "/admin/api/bot/events", admin, map[string]any{"eventType": "reactivation", "telegramId": fmt.Sprint(leaderTG), "payload": map[string]any{"days": 30}}, 201, nil)
		c.call("POST", "/bot/notification", botSecret, map[string]any{"uid": member.UID, "kind": "callback", "text": "Перезвоним на " + logPhones[3]}, 201, nil)
		// An operator's client looks a funnel up by the phone number.
		c.call("GET", "/admin/api/bot/funnel/"+url.PathEscape(logPhones[8]), admin, nil, 0, nil)
		// Bad input on the bot's own paths.
		c.call("POST", "/bot/events/ack", "wrong-secret", map[string]any{"processedIds": []int{1}}, 401, nil)
		c.call("POST", "/bot/events/ack", botSecret, map[string]any{"processedIds": []int{1}, "retryIds": []int{1}}, 400, nil)
		testwait.Until(t, 10*time.Second, "every outbox event handled", func() bool {
			return w.count(t, `select count(*) from bot_event_outbox where processed_at is null and dead_lettered_at is null`) == 0 &&
				w.count(t, `select count(*) from bot_updates where status <> 'done'`) == 0
		})
	})

	t.Run("referral consumers", func(t *testing.T) {
		c.t = t
		owner, investor, other := "aaaaaaaa-0000-4000-8000-00000000000a", "cccccccc-0000-4000-8000-00000000000c", "eeeeeeee-0000-4000-8000-00000000000e"
		event := func(id, user string, payload map[string]any) map[string]any {
			return map[string]any{"messageId": id, "type": "pin.identity.user-upserted", "contractVersion": 1, "aggregateId": user,
				"aggregateType": "User", "occurredAt": "2026-01-15T12:00:00Z", "correlationId": "corr-" + id, "payload": payload}
		}
		c.call("POST", "/admin/api/topics/pin.identity.users.v1/messages", admin, event("m-1", owner, map[string]any{
			"UserId": owner, "Type": "Agent", "CompanyId": "dddddddd-0000-4000-8000-00000000000d", "Status": "Active",
			"Name": map[string]string{"FirstName": "Olga", "LastName": "Agentova"}, "PhoneNumber": logPhones[0], "RegisteredVia": "Sms", "Version": 1}), 202, nil)
		testwait.Until(t, 10*time.Second, "the owner's replica", func() bool { return w.count(t, `select count(*) from referral_users`) == 1 })
		c.call("POST", "/admin/api/referral/links", admin, map[string]string{"url": "olga-agent", "ownerUserId": owner,
			"tenantId": "bbbbbbbb-0000-4000-8000-00000000000b", "channel": "telegram"}, 201, nil)
		c.call("POST", "/admin/api/topics/pin.identity.users.v1/messages", admin, event("m-2", investor, map[string]any{
			"UserId": investor, "Type": "Investor", "Status": "Active", "Name": map[string]string{"FirstName": "Ivan"},
			"PhoneNumber": logPhones[1], "RegisteredVia": "Sms", "ReferrerUrl": "Olga-Agent", "Version": 1}), 202, nil)
		c.call("POST", "/admin/api/topics/pin.identity.users.v1/messages", admin, event("m-3", investor, map[string]any{
			"UserId": investor, "PhoneNumber": logPhones[1], "Version": "two"}), 202, nil)
		c.call("POST", "/admin/api/topics/pin.identity.users.v1/messages", admin, event("m-4", other, map[string]any{
			"UserId": other, "Type": "Investor", "Status": "Active", "Name": map[string]string{"FirstName": "Anna"},
			"PhoneNumber": logPhones[7], "RegisteredVia": "Sms", "Version": 1}), 202, nil)
		// An operator's client looks a replica up by the phone number.
		c.call("GET", "/admin/api/referral/replicas/"+logPhones[6], admin, nil, 0, nil)
		testwait.Until(t, 10*time.Second, "the bond, the dead letter and the third replica", func() bool {
			return w.count(t, `select count(*) from referral_bonds`) == 1 && w.count(t, `select count(*) from queue_dead`) == 1 &&
				w.count(t, `select count(*) from referral_users`) == 3
		})
	})

	t.Run("chat platform in and out", func(t *testing.T) {
		c.t = t
		testwait.Until(t, 10*time.Second, "the inbox bot's webhook", func() bool { return webhookSet(fake, logSecrets["OMNI_TELEGRAM_TOKEN"]) })
		conn, err := inbox.ConnectBusiness(telego.User{ID: 7770001, FirstName: "Shop"}, telego.BusinessBotRights{CanReply: true})
		if err != nil {
			t.Fatal(err)
		}
		customer := telego.User{ID: 7770002, FirstName: "Maria", LastName: "Customer"}
		if _, err := inbox.BusinessMessage(conn.ID, customer, "Перезвоните мне: "+logPhones[2]); err != nil {
			t.Fatal(err)
		}
		var thread int64
		testwait.Until(t, 10*time.Second, "the customer's thread", func() bool {
			return w.db.Read.QueryRow(`select thread_id from omni_messages where direction = 'inbound'`).Scan(&thread) == nil
		})
		c.call("POST", fmt.Sprintf("/admin/api/omni/threads/%d/messages", thread), admin, map[string]string{"text": "Наберём вас на " + logPhones[4]}, 202, nil)
		testwait.Until(t, 10*time.Second, "the reply sent", func() bool {
			return w.count(t, `select count(*) from omni_messages where direction = 'outbound' and origin = 'operator' and status = 'sent'`) == 1
		})
		// Bad input on the webhook: wrong secret, a body that is no update.
		for _, h := range []struct {
			secret, body string
			want         int
		}{{"wrong-secret", `{"update_id":1}`, 401}, {logSecrets["OMNI_WEBHOOK_SECRET"], `{"message":{"text":"` + logPhones[2] + `"}}`, 400}} {
			req, _ := http.NewRequest(http.MethodPost, w.srv.URL+"/webhooks/telegram", strings.NewReader(h.body))
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", h.secret)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != h.want {
				t.Fatalf("webhook with %q: %d, want %d", h.body, resp.StatusCode, h.want)
			}
		}
	})

	t.Run("the logs show no secret and no whole phone number", func(t *testing.T) {
		faults := 0
		for _, call := range fake.CallsTo("sendMessage") {
			if call.Fault != "" {
				faults++
			}
		}
		logs := w.logs.String()
		if faults != 3 || !strings.Contains(logs, "+7***1234") {
			t.Fatalf("%d faults fired on sendMessage, want 3; masked phone logged: %v", faults, strings.Contains(logs, "+7***1234"))
		}
		checkLogs(t, logs, logSecrets)
	})
}

// webhookSet reports whether the fake accepted a setWebhook of token.
func webhookSet(fake *fakebot.Server, token string) bool {
	for _, c := range fake.CallsTo("setWebhook") {
		if c.Token == token && c.OK {
			return true
		}
	}
	return false
}
