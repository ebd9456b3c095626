package omni

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// The fixtures in testdata/updates are Telegram updates as the Bot API
// (9.4) sends them, one per file, one of every Update field and of every
// Message content type, written after the Bot API's documentation and the
// test fixtures of other Telegram libraries. They are pretty-printed, and
// several hold bytes encoding/json would rewrite (<, >, &, U+2028, escaped
// "\u0416" and "\/", keys out of order), so payloadRaw's promise is tested
// on them too.

// The threads the fixtures land in: the private chats of two users with the
// bot, and a customer's chat with a connected business account.
const (
	fixtureThreadAnn      = "bot:6012345678"
	fixtureThreadOleg     = "bot:8012345678"
	fixtureThreadBusiness = "business:ZkDq3v1lAAAAqhJ6bQ6Xo2E:7012345678"
)

// updateWant is what the inbound and chat roles make of one fixture.
type updateWant struct {
	event   EventType
	channel Channel
	// kind, media and service describe the envelope's message, if any.
	kind    MessageKind
	media   string
	service string
	// outcome is the ledger's applied or ignored, or "dead" for a dead letter.
	outcome string
	reason  IgnoreReason
	// thread is where it landed ("" for no thread).
	thread string
}

func wantApplied(event EventType, thread string, kind MessageKind, content string) updateWant {
	w := updateWant{event: event, channel: ChannelTelegramBot, kind: kind, outcome: "applied", thread: thread}
	switch kind {
	case KindMedia:
		w.media = content
	case KindService:
		w.service = content
	}
	if strings.HasPrefix(thread, "business:") {
		w.channel = ChannelTelegramBusiness
	}
	return w
}

func wantIgnored(event EventType, reason IgnoreReason, kind MessageKind, content string) updateWant {
	w := wantApplied(event, "", kind, content)
	w.outcome, w.reason = "ignored", reason
	return w
}

func wantUnused() updateWant { return wantIgnored(EventUnknown, IgnoreUnusedUpdate, "", "") }

// fixtureWants is the expectation for every file in testdata/updates, in
// the order the files are posted (their names').
var fixtureWants = map[string]updateWant{
	"01-message-text.json":                           wantApplied(EventMessageCreated, fixtureThreadAnn, KindText, ""),
	"02-message-animation.json":                      wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "animation"),
	"03-message-audio.json":                          wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "audio"),
	"04-message-document.json":                       wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "document"),
	"05-channel-post-paid-media.json":                wantIgnored(EventMessageCreated, IgnoreGroupChat, KindMedia, "paid_media"),
	"06-message-photo.json":                          wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "photo"),
	"07-message-sticker.json":                        wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "sticker"),
	"08-message-story.json":                          wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "story"),
	"09-message-video.json":                          wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "video"),
	"10-message-video-note.json":                     wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "video_note"),
	"11-message-voice.json":                          wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "voice"),
	"12-message-checklist.json":                      wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "checklist"),
	"13-message-contact.json":                        wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "contact"),
	"14-message-dice.json":                           wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "dice"),
	"15-message-game.json":                           wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "game"),
	"16-message-poll.json":                           wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "poll"),
	"17-message-venue.json":                          wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "venue"),
	"18-message-location.json":                       wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, "location"),
	"19-business-connection.json":                    {event: EventConnectionUpdated, channel: ChannelTelegramBusiness, outcome: "applied"},
	"20-channel-post-giveaway.json":                  wantIgnored(EventMessageCreated, IgnoreGroupChat, KindMedia, "giveaway"),
	"21-channel-post-giveaway-winners.json":          wantIgnored(EventMessageCreated, IgnoreGroupChat, KindMedia, "giveaway_winners"),
	"22-message-successful-payment.json":             wantApplied(EventMessageCreated, fixtureThreadAnn, KindService, "successful_payment"),
	"23-message-refunded-payment.json":               wantApplied(EventMessageCreated, fixtureThreadAnn, KindService, "refunded_payment"),
	"24-message-users-shared.json":                   wantApplied(EventMessageCreated, fixtureThreadAnn, KindService, "users_shared"),
	"25-message-web-app-data.json":                   wantApplied(EventMessageCreated, fixtureThreadAnn, KindService, "web_app_data"),
	"26-message-unknown-content.json":                wantApplied(EventMessageCreated, fixtureThreadAnn, KindMedia, MediaUnknown),
	"27-supergroup-new-chat-members.json":            wantIgnored(EventMessageCreated, IgnoreGroupChat, KindService, "new_chat_members"),
	"28-group-left-chat-member.json":                 wantIgnored(EventMessageCreated, IgnoreGroupChat, KindService, "left_chat_member"),
	"29-supergroup-text-mention.json":                wantIgnored(EventMessageCreated, IgnoreGroupChat, KindText, ""),
	"30-supergroup-pinned-message.json":              wantIgnored(EventMessageCreated, IgnoreGroupChat, KindService, "pinned_message"),
	"31-group-migrate-to-supergroup.json":            wantIgnored(EventMessageCreated, IgnoreGroupChat, KindService, "migrate_to_chat_id"),
	"32-supergroup-forum-topic-created.json":         wantIgnored(EventMessageCreated, IgnoreGroupChat, KindService, "forum_topic_created"),
	"33-edited-message.json":                         wantApplied(EventMessageEdited, fixtureThreadAnn, KindText, ""),
	"34-channel-post.json":                           wantIgnored(EventMessageCreated, IgnoreGroupChat, KindText, ""),
	"35-edited-channel-post.json":                    wantIgnored(EventMessageEdited, IgnoreGroupChat, KindText, ""),
	"36-business-message.json":                       wantApplied(EventMessageCreated, fixtureThreadBusiness, KindText, ""),
	"37-business-message-photo.json":                 wantApplied(EventMessageCreated, fixtureThreadBusiness, KindMedia, "photo"),
	"38-business-message-from-owner.json":            wantApplied(EventMessageCreated, fixtureThreadBusiness, KindText, ""),
	"39-business-message-invoice-from-owner.json":    wantApplied(EventMessageCreated, fixtureThreadBusiness, KindMedia, "invoice"),
	"40-edited-business-message.json":                wantApplied(EventMessageEdited, fixtureThreadBusiness, KindText, ""),
	"41-deleted-business-messages.json":              wantApplied(EventMessageDeleted, fixtureThreadBusiness, "", ""),
	"42-business-message-without-connection-id.json": {event: EventInvalid, channel: ChannelTelegramBusiness, outcome: "dead"},
	"43-message-reaction.json":                       wantUnused(),
	"44-message-reaction-count.json":                 wantUnused(),
	"45-inline-query.json":                           wantUnused(),
	"46-chosen-inline-result.json":                   wantUnused(),
	"47-callback-query-with-message.json":            wantApplied(EventCallbackReceived, fixtureThreadAnn, "", ""),
	"48-callback-query-inline-message.json":          wantApplied(EventCallbackReceived, fixtureThreadAnn, "", ""),
	"49-callback-query-inaccessible-message.json":    wantIgnored(EventCallbackReceived, IgnoreGroupChat, "", ""),
	"50-callback-query-game.json":                    wantApplied(EventCallbackReceived, fixtureThreadAnn, "", ""),
	"51-shipping-query.json":                         wantUnused(),
	"52-pre-checkout-query.json":                     wantUnused(),
	"53-purchased-paid-media.json":                   wantUnused(),
	"54-poll.json":                                   wantUnused(),
	"55-poll-answer.json":                            wantUnused(),
	"56-my-chat-member-private-blocked.json":         wantApplied(EventMembershipUpdated, fixtureThreadAnn, "", ""),
	"57-my-chat-member-added-to-supergroup.json":     wantIgnored(EventMembershipUpdated, IgnoreGroupChat, "", ""),
	"58-chat-member.json":                            wantUnused(),
	"59-chat-join-request.json":                      wantUnused(),
	"60-chat-boost.json":                             wantUnused(),
	"61-removed-chat-boost.json":                     wantUnused(),
	"62-unknown-update-type.json":                    wantIgnored(EventUnknown, IgnoreUnknownUpdate, "", ""),
	"63-message-new-private-customer.json":           wantApplied(EventMessageCreated, fixtureThreadOleg, KindText, ""),
	"64-my-chat-member-private-unblocked.json":       wantApplied(EventMembershipUpdated, fixtureThreadAnn, "", ""),
}

// updateFixture is one file of testdata/updates.
type updateFixture struct {
	name string
	body []byte
	env  *Envelope
}

// loadUpdateFixtures reads testdata/updates in name order and checks that
// the table above covers each file, that each is an update a real Bot API
// library (telego) reads, and that together they hold every Update field
// and every Message content type.
func loadUpdateFixtures(t *testing.T) []updateFixture {
	t.Helper()
	paths, err := filepath.Glob("testdata/updates/*.json")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(paths)
	if len(paths) < 40 {
		t.Fatalf("%d update fixtures, want at least 40", len(paths))
	}
	var (
		out     []updateFixture
		types   = map[string]bool{}
		content = map[string]bool{}
	)
	for _, p := range paths {
		name := filepath.Base(p)
		body, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := fixtureWants[name]; !ok {
			t.Fatalf("%s has no expectation in fixtureWants", name)
		}
		var u telego.Update
		if err := json.Unmarshal(body, &u); err != nil {
			t.Fatalf("%s is not an update telego reads: %v", name, err)
		}
		env, err := NormalizeTelegram(body, inboxBotID, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var fields map[string]json.RawMessage
		_ = json.Unmarshal(body, &fields)
		types[updateKind(fields)] = true
		if m := env.PayloadNormalized.Message; m != nil {
			content[string(m.Kind)+":"+m.Media+m.Service] = true
		}
		out = append(out, updateFixture{name: name, body: body, env: env})
	}
	if len(out) != len(fixtureWants) {
		t.Fatalf("%d fixtures, %d expectations: a file is missing", len(out), len(fixtureWants))
	}
	for _, ut := range updateTypes {
		if !types[ut] {
			t.Errorf("no fixture is a %s update", ut)
		}
	}
	for _, m := range mediaFields {
		if !content["media:"+m] {
			t.Errorf("no fixture is a message with %s", m)
		}
	}
	for _, c := range []string{"text:", "media:" + MediaUnknown} {
		if !content[c] {
			t.Errorf("no fixture is a message of %s", c)
		}
	}
	return out
}

// ledgerRow is a fixture's row in omni_inbound_events.
type ledgerRow struct {
	outcome, reason string
	thread          ThreadID
}

func ledgerRows(t *testing.T, db *store.DB) map[string]ledgerRow {
	t.Helper()
	rows, err := db.Read.Query(`select idempotency_key, outcome, coalesce(reason, ''), coalesce(thread_id, 0) from omni_inbound_events`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]ledgerRow{}
	for rows.Next() {
		var (
			key string
			r   ledgerRow
		)
		if err := rows.Scan(&key, &r.outcome, &r.reason, &r.thread); err != nil {
			t.Fatal(err)
		}
		out[key] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// threadKeys maps each thread to "bot:<chat>" or "business:<conn>:<chat>".
func threadKeys(t *testing.T, db *store.DB) map[ThreadID]string {
	t.Helper()
	rows, err := db.Read.Query(`select id, channel, business_connection_id, chat_id from omni_threads`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[ThreadID]string{}
	for rows.Next() {
		var (
			id                  ThreadID
			channel, conn, chat string
		)
		if err := rows.Scan(&id, &channel, &conn, &chat); err != nil {
			t.Fatal(err)
		}
		if Channel(channel) == ChannelTelegramBusiness {
			out[id] = "business:" + conn + ":" + chat
		} else {
			out[id] = "bot:" + chat
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTelegramUpdateTable posts every fixture of testdata/updates three
// times to the webhook over real HTTP, then lets the chat role apply them:
// each answer is 200, each update is stored once, its envelope matches the
// schema and carries the body byte for byte, and it ends where the Bot API
// implies — in its thread, ignored with its reason, or dead-lettered.
func TestTelegramUpdateTable(t *testing.T) {
	t.Parallel()
	fixtures := loadUpdateFixtures(t)
	ctx := context.Background()

	t.Run("every update is answered 200 three times and stored once, as received", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret})
		base := serve(t, in.Routes)
		for _, f := range fixtures {
			for i := range 3 {
				if status, answer := postUpdate(t, base, testSecret, f.body); status != http.StatusOK || answer != `{"ok":true}` {
					t.Fatalf("%s, delivery %d: %d %s, want 200", f.name, i+1, status, answer)
				}
			}
		}
		bodies := flowBodies(t, db)
		if len(bodies) != len(fixtures) {
			t.Fatalf("%d envelopes on %s for %d updates posted three times each", len(bodies), QueueReceiverFlow, len(fixtures))
		}
		byKey := map[string][]byte{}
		for _, b := range bodies {
			requireValidEnvelopeJSON(t, b)
			env, err := decodeEnvelope(b)
			if err != nil {
				t.Fatal(err)
			}
			byKey[env.IdempotencyKey] = b
		}
		for _, f := range fixtures {
			b, ok := byKey[f.env.IdempotencyKey]
			if !ok {
				t.Errorf("%s: %s is not on %s", f.name, f.env.IdempotencyKey, QueueReceiverFlow)
				continue
			}
			if !bytes.Contains(b, append(append([]byte(`"payloadRaw":`), f.body...), `,"payloadNormalized":`...)) {
				t.Errorf("%s: the stored envelope does not carry the update byte for byte:\n%s", f.name, b)
			}
			if n := count(t, db, `select count(*) from queue_keys where queue = ? and key = ?`, QueueReceiverFlow, f.env.IdempotencyKey); n != 1 {
				t.Errorf("%s: %d idempotency keys, want 1", f.name, n)
			}
		}
	})

	t.Run("the chat role threads, ignores or dead-letters each update as the Bot API implies", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret})
		base := serve(t, in.Routes)
		runWorker(t, NewChat(ChatOpts{DB: db, PollInterval: 20 * time.Millisecond}))
		for _, f := range fixtures {
			for i := range 3 {
				if status, answer := postUpdate(t, base, testSecret, f.body); status != http.StatusOK {
					t.Fatalf("%s, delivery %d: %d %s, want 200", f.name, i+1, status, answer)
				}
			}
		}
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		dead := func() []queue.DeadLetter {
			d, err := admin.ListDead(ctx, queue.DeadFilter{Queue: QueueReceiverFlow, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		testwait.Until(t, 20*time.Second, "", func() bool {
			return len(ledgerRows(t, db))+len(dead()) == len(fixtures)
		}, func() string {
			return fmt.Sprintf("%d of %d updates in the ledger, %d dead", len(ledgerRows(t, db)), len(fixtures), len(dead()))
		})

		ledger, threads := ledgerRows(t, db), threadKeys(t, db)
		deadKeys := map[string]string{}
		for _, d := range dead() {
			env, err := decodeEnvelope(d.Body)
			if err != nil {
				t.Fatal(err)
			}
			deadKeys[env.IdempotencyKey] = d.LastError
		}
		for _, f := range fixtures {
			want := fixtureWants[f.name]
			t.Run(f.name, func(t *testing.T) {
				env, n := f.env, f.env.PayloadNormalized
				if env.EventType != want.event || env.Channel != want.channel {
					t.Errorf("eventType %q channel %q, want %q %q", env.EventType, env.Channel, want.event, want.channel)
				}
				var kind MessageKind
				var media, service string
				if n.Message != nil {
					kind, media, service = n.Message.Kind, n.Message.Media, n.Message.Service
				}
				if kind != want.kind || media != want.media || service != want.service {
					t.Errorf("message kind %q media %q service %q, want %q %q %q", kind, media, service, want.kind, want.media, want.service)
				}
				if want.outcome == "dead" {
					reason, ok := deadKeys[env.IdempotencyKey]
					if !ok || !strings.Contains(reason, n.Reason) || n.Reason == "" {
						t.Errorf("dead letter %v with %q, want one naming %q", ok, reason, n.Reason)
					}
					if _, inLedger := ledger[env.IdempotencyKey]; inLedger {
						t.Errorf("a dead-lettered update is in the ledger too")
					}
					return
				}
				row, ok := ledger[env.IdempotencyKey]
				if !ok {
					t.Fatalf("not in the ledger")
				}
				if row.outcome != want.outcome || row.reason != string(want.reason) {
					t.Errorf("ledger outcome %q reason %q, want %q %q", row.outcome, row.reason, want.outcome, want.reason)
				}
				if got := threads[row.thread]; got != want.thread {
					t.Errorf("thread %q, want %q", got, want.thread)
				}
			})
		}

		t.Run("only the private and business chats became threads", func(t *testing.T) {
			got := map[string]bool{}
			for _, k := range threads {
				got[k] = true
			}
			want := map[string]bool{fixtureThreadAnn: true, fixtureThreadOleg: true, fixtureThreadBusiness: true}
			if len(got) != len(want) || !got[fixtureThreadAnn] || !got[fixtureThreadOleg] || !got[fixtureThreadBusiness] {
				t.Errorf("threads %v, want %v", got, want)
			}
		})

		t.Run("each new customer got one acknowledgement and no group got any", func(t *testing.T) {
			var chats []string
			for _, b := range queuedBodies(t, db, QueueSenderFlow) {
				var cmd SendCommand
				if err := json.Unmarshal(b, &cmd); err != nil {
					t.Fatal(err)
				}
				chats = append(chats, cmd.BusinessConnectionID+":"+cmd.ChatID)
			}
			slices.Sort(chats)
			if want := []string{":6012345678", ":8012345678", "ZkDq3v1lAAAAqhJ6bQ6Xo2E:7012345678"}; !slices.Equal(chats, want) {
				t.Errorf("acknowledgements to %v, want %v", chats, want)
			}
		})

		t.Run("edits, deletions, the owner's own messages and blocking took effect", func(t *testing.T) {
			type row struct {
				text, direction, status string
				deleted                 bool
			}
			msg := func(thread, providerID string) row {
				var r row
				var deleted int
				for id, k := range threads {
					if k != thread {
						continue
					}
					if err := db.Read.QueryRow(`select text, direction, status, case when deleted_at is null then 0 else 1 end from omni_messages
						where thread_id = ? and provider_message_id = ?`, int64(id), providerID).Scan(&r.text, &r.direction, &r.status, &deleted); err != nil {
						t.Fatalf("message %s of %s: %v", providerID, thread, err)
					}
				}
				r.deleted = deleted == 1
				return r
			}
			if r := msg(fixtureThreadAnn, "101"); r.text != "Здравствуйте! Заказ №4521 ещё не пришёл." {
				t.Errorf("the private message after its edit reads %q", r.text)
			}
			if r := msg(fixtureThreadBusiness, "5002"); r.text != "Hi! Is size 43 back in stock? Black, please." {
				t.Errorf("the business message after its edit reads %q", r.text)
			}
			if r := msg(fixtureThreadBusiness, "5003"); !r.deleted {
				t.Errorf("the deleted business photo is not marked deleted")
			}
			for _, id := range []string{"5004", "5005"} {
				if r := msg(fixtureThreadBusiness, id); r.direction != "outbound" || r.status != "sent" {
					t.Errorf("the owner's message %s is %s %s, want outbound sent", id, r.direction, r.status)
				}
			}
			if n := count(t, db, `select count(*) from omni_contacts where provider_user_id = '6012345678' and reachable = 1`); n != 1 {
				t.Errorf("the user who blocked and unblocked the bot is not reachable")
			}
		})
	})

	t.Run("with group chats admitted, groups and channels become threads that are never acknowledged", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret})
		base := serve(t, in.Routes)
		runWorker(t, NewChat(ChatOpts{DB: db, PollInterval: 20 * time.Millisecond, GroupChats: GroupChatsThread}))
		var posted []updateFixture
		for _, f := range fixtures {
			if fixtureWants[f.name].reason != IgnoreGroupChat {
				continue
			}
			posted = append(posted, f)
			if status, answer := postUpdate(t, base, testSecret, f.body); status != http.StatusOK {
				t.Fatalf("%s: %d %s", f.name, status, answer)
			}
		}
		testwait.Until(t, 20*time.Second, "", func() bool { return len(ledgerRows(t, db)) == len(posted) }, func() string { return fmt.Sprintf("%d of %d applied", len(ledgerRows(t, db)), len(posted)) })
		ledger := ledgerRows(t, db)
		for _, f := range posted {
			if r := ledger[f.env.IdempotencyKey]; r.reason == string(IgnoreGroupChat) {
				t.Errorf("%s ignored as a group chat although they are admitted", f.name)
			}
		}
		got := map[string]bool{}
		for _, k := range threadKeys(t, db) {
			got[k] = true
		}
		for _, chat := range []string{"bot:-1001234567890", "bot:-4012345678", "bot:-1009876543210"} {
			if !got[chat] {
				t.Errorf("no thread for %s; threads %v", chat, got)
			}
		}
		if n := count(t, db, `select count(*) from omni_contacts where name = 'Support team'`); n != 1 {
			t.Errorf("%d contacts named after the supergroup, want 1", n)
		}
		if cmds := queuedBodies(t, db, QueueSenderFlow); len(cmds) != 0 {
			t.Errorf("%d acknowledgements queued into group chats, want none: %s", len(cmds), cmds)
		}
	})
}
