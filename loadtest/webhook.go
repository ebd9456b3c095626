package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
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
		header: http.Header{"X-Telegram-Bot-Api-Secret-Token": {opts.WebhookSecret}},
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
func (g *webhookGen) prepare(ctx context.Context) error {
	if g.conn != BusinessConnectionID {
		return nil
	}
	owner := map[string]any{"id": OwnerUserID, "is_bot": false, "first_name": "Магазин"}
	raw, _ := json.Marshal(map[string]any{
		"update_id": g.updateID(999_999_999),
		"business_connection": map[string]any{
			"id": g.conn, "user": owner, "user_chat_id": OwnerUserID, "date": time.Now().Unix(),
			"is_enabled": true, "rights": map[string]any{"can_reply": true},
		},
	})
	return g.api.do(ctx, http.MethodPost, "/webhooks/telegram", g.header, raw, nil)
}

func (g *webhookGen) send(ctx context.Context, n int64) (Item, error) {
	id := g.updateID(n)
	chat := CustomerChatID(n % g.customers)
	body := businessUpdate(g.conn, id, chat, id, fmt.Sprintf("Здравствуйте! Вопрос по заказу №%d: когда доставка?", n))
	if err := g.api.do(ctx, http.MethodPost, "/webhooks/telegram", g.header, body, nil); err != nil {
		return Item{}, err
	}
	return Item{Path: PathWebhook, Key: strconv.FormatInt(id, 10), Subject: strconv.FormatInt(chat, 10), Seq: id}, nil
}

// background sends a probe message every 250 ms and times how long the
// chat role takes to store it where the operators' API shows it.
func (g *webhookGen) background(ctx context.Context, rec *recorder) {
	var thread int64
	for k := int64(1); ctx.Err() == nil; k++ {
		id := g.updateID(900_000_000 + k)
		text := fmt.Sprintf("probe %d/%d", g.runID, k)
		if err := g.api.do(ctx, http.MethodPost, "/webhooks/telegram", g.header, businessUpdate(g.conn, id, ProbeChatID, id, text), nil); err != nil {
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		accepted := time.Now()
		for ctx.Err() == nil {
			if thread == 0 {
				thread = g.findProbeThread(ctx)
			}
			if thread != 0 && g.threadHas(ctx, thread, text) {
				rec.handled(time.Since(accepted))
				break
			}
			sleep(ctx, 5*time.Millisecond)
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

func (g *webhookGen) findProbeThread(ctx context.Context) int64 {
	var out struct {
		Threads []struct {
			ID      int64 `json:"id"`
			Contact struct {
				ProviderUserID string `json:"providerUserId"`
			} `json:"contact"`
		} `json:"threads"`
	}
	if g.api.adminDo(ctx, http.MethodGet, "/admin/api/omni/threads?limit=50", nil, &out) != nil {
		return 0
	}
	for _, t := range out.Threads {
		if t.Contact.ProviderUserID == strconv.FormatInt(ProbeChatID, 10) {
			return t.ID
		}
	}
	return 0
}

func (g *webhookGen) threadHas(ctx context.Context, thread int64, text string) bool {
	msgs, err := ThreadMessages(ctx, g.api, thread)
	if err != nil {
		return false
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Text == text {
			return true
		}
	}
	return false
}

// drained: the chat role has taken every accepted update off receiver.flow.
func (g *webhookGen) drained(ctx context.Context) bool {
	return queueEmpty(ctx, g.api, "receiver.flow")
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
	var all []Message
	after := int64(0)
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
