package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// webhookGen posts Telegram Business messages from a fixed set of customers
// to POST /webhooks/telegram, as Telegram would.
type webhookGen struct {
	api       *client
	secret    string
	runID     int64
	customers int64
	conn      string
	header    http.Header
	noProbes  bool

	// With Opts.Tally: each customer's updates answered 200, and its
	// thread's unread count before the run.
	tallying bool
	perChat  []atomic.Int64
	before   map[string]int

	probeClock
}

// CustomerChatID is the Telegram chat id of load-test customer i.
func CustomerChatID(i int64) int64 { return 8_000_000_000 + i }

// ProbeChatID is the customer whose messages measure accepted → stored.
const ProbeChatID = 8_999_999_999

// BusinessConnectionID is the connection load-test customers write to
// unless Opts.BusinessConnection names another.
const BusinessConnectionID = "loadtest-business"

func newWebhookGen(api *client, opts Opts) *webhookGen {
	return &webhookGen{
		api: api, secret: opts.WebhookSecret, runID: opts.RunID, customers: int64(opts.Customers), conn: opts.BusinessConnection,
		header:   http.Header{"X-Telegram-Bot-Api-Secret-Token": {opts.WebhookSecret}},
		noProbes: opts.NoWebhookProbes,
		tallying: opts.Tally, perChat: make([]atomic.Int64, opts.Customers),
	}
}

// updateID keeps ids unique across runs and below 2^53.
func (g *webhookGen) updateID(n int64) int64 { return g.runID%1_000_000*1_000_000_000 + n }

// businessUpdate is the JSON Telegram sends for a customer's message.
func businessUpdate(conn string, updateID, chatID, messageID int64, text string) []byte {
	user := map[string]any{"id": chatID, "is_bot": false, "first_name": "Покупатель", "last_name": strconv.FormatInt(chatID%10000, 10), "username": fmt.Sprintf("customer_%d", chatID), "language_code": "ru"}
	u := map[string]any{
		"update_id": updateID,
		"business_message": map[string]any{
			"message_id":             messageID,
			"business_connection_id": conn,
			"from":                   user,
			"chat":                   map[string]any{"id": chatID, "type": "private", "first_name": user["first_name"], "last_name": user["last_name"], "username": user["username"]},
			"date":                   time.Now().Unix(),
			"text":                   text,
		},
	}
	raw, _ := json.Marshal(u)
	return raw
}

// OwnerUserID is the Telegram user who owns the load's own business
// account (BusinessConnectionID).
const OwnerUserID = 7_999_999_999

// prepare connects the load's own business account, as Telegram announces
// a connection (business_connection) before its chats' messages: the chat
// role then knows who owns it and that it may reply, and acknowledges each
// customer's first message. A test that passes its own connection
// (Opts.BusinessConnection) has connected it through its fake Bot API.
// Then, for the tally, it reads the customers' unread counts before the
// load.
func (g *webhookGen) prepare(ctx context.Context) error {
	if g.conn == BusinessConnectionID {
		owner := map[string]any{"id": OwnerUserID, "is_bot": false, "first_name": "Магазин"}
		raw, _ := json.Marshal(map[string]any{
			"update_id": g.updateID(999_999_999),
			"business_connection": map[string]any{
				"id": g.conn, "user": owner, "user_chat_id": OwnerUserID, "date": time.Now().Unix(),
				"is_enabled": true, "rights": map[string]any{"can_reply": true},
			},
		})
		if err := g.api.do(ctx, http.MethodPost, "/webhooks/telegram", g.header, raw, nil); err != nil {
			return err
		}
	}
	if !g.tallying {
		return nil
	}
	threads, err := g.threads(ctx)
	if err != nil {
		return err
	}
	g.before = map[string]int{}
	for _, t := range threads {
		if t.BusinessConnectionID == g.conn {
			g.before[t.Contact.ProviderUserID] = t.Unread
		}
	}
	return nil
}

func (g *webhookGen) send(ctx context.Context, n int64) (Item, error) {
	id := g.updateID(n)
	chat := CustomerChatID(n % g.customers)
	body := businessUpdate(g.conn, id, chat, id, fmt.Sprintf("Здравствуйте! Вопрос по заказу №%d: когда доставка?", n))
	if err := g.api.do(ctx, http.MethodPost, "/webhooks/telegram", g.header, body, nil); err != nil {
		return Item{}, err
	}
	g.perChat[n%g.customers].Add(1)
	return Item{Path: PathWebhook, Key: strconv.FormatInt(id, 10), Subject: strconv.FormatInt(chat, 10), Seq: id}, nil
}

// background sends a probe message every 250 ms and times how long the
// chat role takes to store it where the operators' API shows it (unless
// Opts.NoWebhookProbes). It reads the probe's thread after the last probe
// found, so that a long run does not read the whole thread every time; once
// a second while it waits it reads from the start, in case retention
// removed every message and the thread's positions began again.
func (g *webhookGen) background(ctx context.Context, rec *recorder) {
	if g.noProbes {
		return
	}
	var thread, after int64
	for k := int64(1); ctx.Err() == nil; k++ {
		id := g.updateID(900_000_000 + k)
		text := fmt.Sprintf("probe %d/%d", g.runID, k)
		if err := g.api.do(ctx, http.MethodPost, "/webhooks/telegram", g.header, businessUpdate(g.conn, id, ProbeChatID, id, text), nil); err != nil {
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		accepted := time.Now()
		g.setProbe(accepted)
		fromStart := accepted // when the thread was last read from the start
		for ctx.Err() == nil {
			if thread == 0 {
				thread = g.findProbeThread(ctx)
			}
			if thread != 0 {
				from := after
				if time.Since(fromStart) > time.Second {
					from, fromStart = 0, time.Now()
				}
				if seq, ok := g.threadHas(ctx, thread, from, text); ok {
					rec.handled(time.Since(accepted))
					after = seq
					break
				}
			}
			sleep(ctx, 5*time.Millisecond)
		}
		g.setProbe(time.Time{})
		sleep(ctx, 250*time.Millisecond)
	}
}

// threadJSON is a thread as the operators' API lists it.
type threadJSON struct {
	ID                   int64  `json:"id"`
	BusinessConnectionID string `json:"businessConnectionId"`
	Unread               int    `json:"unread"`
	Contact              struct {
		ProviderUserID string `json:"providerUserId"`
	} `json:"contact"`
}

// threads lists the latest 500 threads.
func (g *webhookGen) threads(ctx context.Context) ([]threadJSON, error) {
	var out struct {
		Threads []threadJSON `json:"threads"`
	}
	err := g.api.adminDo(ctx, http.MethodGet, "/admin/api/omni/threads?limit=500", nil, &out)
	return out.Threads, err
}

func (g *webhookGen) findProbeThread(ctx context.Context) int64 {
	threads, err := g.threads(ctx)
	if err != nil {
		return 0
	}
	for _, t := range threads {
		if t.Contact.ProviderUserID == strconv.FormatInt(ProbeChatID, 10) && t.BusinessConnectionID == g.conn {
			return t.ID
		}
	}
	return 0
}

// threadHas looks for text among the thread's messages after position
// after, and returns the position of the message that has it.
func (g *webhookGen) threadHas(ctx context.Context, thread, after int64, text string) (int64, bool) {
	msgs, err := threadMessagesAfter(ctx, g.api, thread, after)
	if err != nil {
		return 0, false
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Text == text {
			return msgs[i].Seq, true
		}
	}
	return 0, false
}

// tally: every customer's thread's unread count grew by its updates
// answered 200 (see WebhookTally).
func (g *webhookGen) tally(ctx context.Context, t *Tally) error {
	threads, err := g.threads(ctx)
	if err != nil {
		return err
	}
	unread := map[string]int{}
	for _, th := range threads {
		if th.BusinessConnectionID == g.conn {
			unread[th.Contact.ProviderUserID] = th.Unread
		}
	}
	w := &WebhookTally{}
	for i := range g.perChat {
		accepted := g.perChat[i].Load()
		if accepted == 0 {
			continue
		}
		w.Chats++
		w.Accepted += accepted
		chat := strconv.FormatInt(CustomerChatID(int64(i)), 10)
		now, ok := unread[chat]
		if !ok {
			w.NoThread++
			w.Missing += accepted
			continue
		}
		stored := int64(now - g.before[chat])
		w.Stored += stored
		w.Missing += max(accepted-stored, 0)
		w.Extra += max(stored-accepted, 0)
	}
	t.Webhook = w
	return nil
}

// drained: the chat role has taken every accepted update off receiver.flow
// and its retry lane.
func (g *webhookGen) drained(ctx context.Context) bool {
	return queueEmpty(ctx, g.api, "receiver.flow") && queueEmpty(ctx, g.api, "receiver.retry")
}

// Message is an omni message as the operators' API shows it.
type Message struct {
	ID                int64   `json:"id"`
	Seq               int64   `json:"seq"`
	Direction         string  `json:"direction"`
	Text              string  `json:"text"`
	Status            string  `json:"status"`
	ProviderMessageID *string `json:"providerMessageId"`
}

// ThreadMessages lists a thread's messages through the operators' API.
func ThreadMessages(ctx context.Context, api *client, thread int64) ([]Message, error) {
	return threadMessagesAfter(ctx, api, thread, 0)
}

// threadMessagesAfter lists a thread's messages after position after.
func threadMessagesAfter(ctx context.Context, api *client, thread, after int64) ([]Message, error) {
	var all []Message
	for {
		var out struct {
			Messages []Message `json:"messages"`
		}
		path := fmt.Sprintf("/admin/api/omni/threads/%d/messages?after=%d&limit=500", thread, after)
		if err := api.adminDo(ctx, http.MethodGet, path, nil, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Messages...)
		if len(out.Messages) < 500 {
			return all, nil
		}
		after = out.Messages[len(out.Messages)-1].Seq
	}
}

// queueEmpty reports whether a queue has nothing ready, in flight, delayed or held.
func queueEmpty(ctx context.Context, api *client, name string) bool {
	var out struct {
		Queues []struct {
			Name     string `json:"name"`
			Ready    int64  `json:"ready"`
			InFlight int64  `json:"inFlight"`
			Delayed  int64  `json:"delayed"`
			Held     int64  `json:"held"`
		} `json:"queues"`
	}
	if api.adminDo(ctx, http.MethodGet, "/admin/api/queues", nil, &out) != nil {
		return false
	}
	for _, q := range out.Queues {
		if q.Name == name {
			return q.Ready+q.InFlight+q.Delayed+q.Held == 0
		}
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
