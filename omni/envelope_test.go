package omni

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const schemaPath = "../docs/contracts/omni-inbound-envelope.v1.json"

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

// envelopeSchema compiles the published JSON Schema once, with formats
// (date-time) asserted.
func envelopeSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	schemaOnce.Do(func() {
		f, err := os.Open(schemaPath)
		if err != nil {
			schemaErr = err
			return
		}
		defer f.Close()
		doc, err := jsonschema.UnmarshalJSON(f)
		if err != nil {
			schemaErr = err
			return
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		if schemaErr = c.AddResource("omni-inbound-envelope.v1.json", doc); schemaErr != nil {
			return
		}
		schema, schemaErr = c.Compile("omni-inbound-envelope.v1.json")
	})
	if schemaErr != nil {
		t.Fatalf("compile %s: %v", schemaPath, schemaErr)
	}
	return schema
}

// validateEnvelopeJSON checks raw (one envelope's JSON) against the schema.
func validateEnvelopeJSON(t testing.TB, raw []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	return envelopeSchema(t).Validate(inst)
}

// envelopeDumpEnv names a directory where the tests write every envelope
// the inbound role produced and the schema accepted, one file each, for
// .ci/schema-check to validate again with an independent validator (ajv).
const envelopeDumpEnv = "SWITCHYARD_ENVELOPE_DUMP"

// dumpEnvelope writes raw to $SWITCHYARD_ENVELOPE_DUMP/<sha256>.json when the
// variable is set.
func dumpEnvelope(t testing.TB, raw []byte) {
	t.Helper()
	dir := os.Getenv(envelopeDumpEnv)
	if dir == "" {
		return
	}
	sum := sha256.Sum256(raw)
	if err := os.WriteFile(filepath.Join(dir, hex.EncodeToString(sum[:])+".json"), raw, 0o644); err != nil {
		t.Fatalf("dump envelope: %v", err)
	}
}

// requireValidEnvelopeJSON fails the test if the schema refuses raw, an
// envelope the inbound role produced, and dumps it for .ci/schema-check.
func requireValidEnvelopeJSON(t testing.TB, raw []byte) {
	t.Helper()
	if err := validateEnvelopeJSON(t, raw); err != nil {
		t.Fatalf("envelope does not match the v1 schema: %v\n%s", err, raw)
	}
	dumpEnvelope(t, raw)
}

// requireValidEnvelope encodes env as the inbound role does and fails the
// test if the schema refuses it.
func requireValidEnvelope(t testing.TB, env *Envelope) []byte {
	t.Helper()
	raw, err := env.Encode()
	if err != nil {
		t.Fatalf("encode envelope: %v", err)
	}
	requireValidEnvelopeJSON(t, raw)
	return raw
}

const testBotID = 7001

var received = time.Date(2026, 2, 21, 10, 0, 0, 123456000, time.UTC)

func TestNormalizeTelegram(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		update   string
		event    EventType
		channel  Channel
		msgID    string // "" means null
		orderKey string
		check    func(t *testing.T, n Normalized, env *Envelope)
	}{
		{
			name:     "a private message becomes message.created on the bot channel",
			update:   `{"update_id":10,"message":{"message_id":5,"from":{"id":42,"is_bot":false,"first_name":"Ann","username":"ann"},"chat":{"id":42,"type":"private","first_name":"Ann","username":"ann"},"date":1771668000,"text":"hello"}}`,
			event:    EventMessageCreated,
			channel:  ChannelTelegramBot,
			msgID:    "5",
			orderKey: "telegram:7001:chat:42",
			check: func(t *testing.T, n Normalized, env *Envelope) {
				if n.Message.Text != "hello" || n.Message.Kind != KindText {
					t.Errorf("message = %+v, want text hello", n.Message)
				}
				if n.Sender == nil || n.Sender.ID != "42" || n.Chat.FirstName != "Ann" {
					t.Errorf("sender %+v chat %+v", n.Sender, n.Chat)
				}
				if want := time.Unix(1771668000, 0).UTC(); !env.OccurredAt.Equal(want) {
					t.Errorf("occurredAt = %v, want the message date %v", env.OccurredAt, want)
				}
			},
		},
		{
			name:     "an edited private message becomes message.edited dated by its edit",
			update:   `{"update_id":11,"edited_message":{"message_id":5,"from":{"id":42,"is_bot":false,"first_name":"Ann"},"chat":{"id":42,"type":"private"},"date":1771668000,"edit_date":1771668060,"text":"hello!"}}`,
			event:    EventMessageEdited,
			channel:  ChannelTelegramBot,
			msgID:    "5",
			orderKey: "telegram:7001:chat:42",
			check: func(t *testing.T, n Normalized, env *Envelope) {
				want := time.Unix(1771668060, 0).UTC()
				if n.Message.EditedAt == nil || !n.Message.EditedAt.Equal(want) || !env.OccurredAt.Equal(want) {
					t.Errorf("editedAt %v occurredAt %v, want %v", n.Message.EditedAt, env.OccurredAt, want)
				}
			},
		},
		{
			name:     "a business connection carries its state and the reply right of Bot API 9",
			update:   `{"update_id":12,"business_connection":{"id":"bc-1","user":{"id":900,"is_bot":false,"first_name":"Shop"},"user_chat_id":900,"date":1771668000,"rights":{"can_reply":true},"is_enabled":true}}`,
			event:    EventConnectionUpdated,
			channel:  ChannelTelegramBusiness,
			orderKey: "telegram:7001:connection:bc-1",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				c := n.Connection
				if c == nil || c.ID != "bc-1" || c.UserID != "900" || c.UserChatID != "900" || !c.Enabled || !c.CanReply {
					t.Errorf("connection = %+v", c)
				}
				if n.BusinessConnectionID != "bc-1" {
					t.Errorf("businessConnectionId = %q", n.BusinessConnectionID)
				}
			},
		},
		{
			name:     "a business connection of the older API keeps can_reply from the top level",
			update:   `{"update_id":13,"business_connection":{"id":"bc-2","user":{"id":901,"is_bot":false,"first_name":"Shop"},"user_chat_id":901,"date":1771668000,"can_reply":false,"is_enabled":false}}`,
			event:    EventConnectionUpdated,
			channel:  ChannelTelegramBusiness,
			orderKey: "telegram:7001:connection:bc-2",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if c := n.Connection; c.Enabled || c.CanReply {
					t.Errorf("connection = %+v, want disabled and unable to reply", c)
				}
			},
		},
		{
			name:     "a business message is keyed by its connection and chat",
			update:   `{"update_id":14,"business_message":{"message_id":77,"from":{"id":55,"is_bot":false,"first_name":"Bob"},"chat":{"id":55,"type":"private","first_name":"Bob"},"date":1771668000,"business_connection_id":"bc-1","text":"do you deliver?"}}`,
			event:    EventMessageCreated,
			channel:  ChannelTelegramBusiness,
			msgID:    "77",
			orderKey: "telegram:7001:business:bc-1:55",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if n.BusinessConnectionID != "bc-1" || n.Message.Text != "do you deliver?" {
					t.Errorf("normalized = %+v", n)
				}
			},
		},
		{
			name:     "an edited business message keeps its connection",
			update:   `{"update_id":15,"edited_business_message":{"message_id":77,"from":{"id":55,"is_bot":false,"first_name":"Bob"},"chat":{"id":55,"type":"private"},"date":1771668000,"edit_date":1771668100,"business_connection_id":"bc-1","text":"do you deliver today?"}}`,
			event:    EventMessageEdited,
			channel:  ChannelTelegramBusiness,
			msgID:    "77",
			orderKey: "telegram:7001:business:bc-1:55",
		},
		{
			name:     "deleted business messages list every id",
			update:   `{"update_id":16,"deleted_business_messages":{"business_connection_id":"bc-1","chat":{"id":55,"type":"private"},"message_ids":[77,78]}}`,
			event:    EventMessageDeleted,
			channel:  ChannelTelegramBusiness,
			orderKey: "telegram:7001:business:bc-1:55",
			check: func(t *testing.T, n Normalized, env *Envelope) {
				if strings.Join(n.DeletedMessageIDs, ",") != "77,78" {
					t.Errorf("deleted ids = %v", n.DeletedMessageIDs)
				}
				if !env.OccurredAt.Equal(env.ReceivedAt) {
					t.Errorf("occurredAt %v, want receivedAt (the update has no date)", env.OccurredAt)
				}
			},
		},
		{
			name:     "my_chat_member kicked carries both statuses",
			update:   `{"update_id":17,"my_chat_member":{"chat":{"id":42,"type":"private"},"from":{"id":42,"is_bot":false,"first_name":"Ann"},"date":1771668000,"old_chat_member":{"status":"member","user":{"id":7001,"is_bot":true,"first_name":"B"}},"new_chat_member":{"status":"kicked","user":{"id":7001,"is_bot":true,"first_name":"B"},"until_date":0}}}`,
			event:    EventMembershipUpdated,
			channel:  ChannelTelegramBot,
			orderKey: "telegram:7001:chat:42",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if n.Membership == nil || n.Membership.OldStatus != "member" || n.Membership.NewStatus != "kicked" {
					t.Errorf("membership = %+v", n.Membership)
				}
			},
		},
		{
			name:     "a callback query belongs to the chat of its message",
			update:   `{"update_id":18,"callback_query":{"id":"cb-9","from":{"id":42,"is_bot":false,"first_name":"Ann"},"message":{"message_id":3,"chat":{"id":42,"type":"private"},"date":1771668000,"text":"pick"},"chat_instance":"x","data":"yes"}}`,
			event:    EventCallbackReceived,
			channel:  ChannelTelegramBot,
			orderKey: "telegram:7001:chat:42",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if n.Callback == nil || n.Callback.Data != "yes" || n.Callback.MessageID != "3" {
					t.Errorf("callback = %+v", n.Callback)
				}
			},
		},
		{
			name:     "a callback from an inline message falls back to the presser's chat",
			update:   `{"update_id":19,"callback_query":{"id":"cb-10","from":{"id":43,"is_bot":false,"first_name":"Cy"},"inline_message_id":"im","chat_instance":"x","data":"no"}}`,
			event:    EventCallbackReceived,
			channel:  ChannelTelegramBot,
			orderKey: "telegram:7001:chat:43",
		},
		{
			name:     "a photo with a caption is a media message",
			update:   `{"update_id":20,"message":{"message_id":6,"from":{"id":42,"is_bot":false,"first_name":"Ann"},"chat":{"id":42,"type":"private"},"date":1771668000,"photo":[{"file_id":"f","file_unique_id":"u","width":1,"height":1}],"caption":"look"}}`,
			event:    EventMessageCreated,
			channel:  ChannelTelegramBot,
			msgID:    "6",
			orderKey: "telegram:7001:chat:42",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if n.Message.Kind != KindMedia || n.Message.Media != "photo" || n.Message.Text != "look" {
					t.Errorf("message = %+v", n.Message)
				}
			},
		},
		{
			name:     "a business message without business_connection_id is an invalid event, not a refusal",
			update:   `{"update_id":22,"business_message":{"message_id":78,"from":{"id":55,"is_bot":false,"first_name":"Bob"},"chat":{"id":55,"type":"private"},"date":1771668000,"text":"hi"}}`,
			event:    EventInvalid,
			channel:  ChannelTelegramBusiness,
			orderKey: "",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if n.UpdateType != "business_message" || n.Reason != "business_message has no business_connection_id" || n.Chat != nil || n.Message != nil {
					t.Errorf("normalized = %+v", n)
				}
			},
		},
		{
			name:     "an edited business message without business_connection_id is invalid too",
			update:   `{"update_id":23,"edited_business_message":{"message_id":78,"chat":{"id":55,"type":"private"},"date":1771668000,"edit_date":1771668001,"text":"hi!"}}`,
			event:    EventInvalid,
			channel:  ChannelTelegramBusiness,
			orderKey: "",
		},
		{
			name:     "deleted business messages without business_connection_id are invalid",
			update:   `{"update_id":24,"deleted_business_messages":{"chat":{"id":55,"type":"private"},"message_ids":[1]}}`,
			event:    EventInvalid,
			channel:  ChannelTelegramBusiness,
			orderKey: "",
		},
		{
			name:     "a business connection with an id longer than the schema allows is invalid",
			update:   `{"update_id":25,"business_connection":{"id":"` + strings.Repeat("x", 257) + `","user":{"id":9,"is_bot":false,"first_name":"O"},"user_chat_id":9,"date":1771668000,"is_enabled":true}}`,
			event:    EventInvalid,
			channel:  ChannelTelegramBusiness,
			orderKey: "",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if n.Reason != "business_connection.id is longer than 256 bytes" {
					t.Errorf("reason = %q", n.Reason)
				}
			},
		},
		{
			name:     "a message field of the wrong JSON type makes the update invalid, with the decoder's words",
			update:   `{"update_id":26,"message":{"message_id":5,"chat":{"id":42,"type":"private"},"date":1771668000,"text":5}}`,
			event:    EventInvalid,
			channel:  ChannelTelegramBot,
			orderKey: "",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if n.UpdateType != "message" || !strings.HasPrefix(n.Reason, "message: json: cannot unmarshal number") {
					t.Errorf("normalized = %+v", n)
				}
			},
		},
		{
			name:     "a message without its chat is invalid",
			update:   `{"update_id":27,"message":{"message_id":5,"date":1771668000,"text":"where am I"}}`,
			event:    EventInvalid,
			channel:  ChannelTelegramBot,
			orderKey: "",
		},
		{
			name:     "a null message is invalid",
			update:   `{"update_id":28,"message":null}`,
			event:    EventInvalid,
			channel:  ChannelTelegramBot,
			orderKey: "",
		},
		{
			name:     "a callback query without an id is invalid",
			update:   `{"update_id":29,"callback_query":{"from":{"id":42,"is_bot":false,"first_name":"Ann"},"chat_instance":"x","data":"no"}}`,
			event:    EventInvalid,
			channel:  ChannelTelegramBot,
			orderKey: "",
		},
		{
			name:     "a channel post is a created message in a channel chat",
			update:   `{"update_id":30,"channel_post":{"message_id":9,"sender_chat":{"id":-1001,"type":"channel","title":"News"},"chat":{"id":-1001,"type":"channel","title":"News"},"date":1771668000,"text":"release"}}`,
			event:    EventMessageCreated,
			channel:  ChannelTelegramBot,
			msgID:    "9",
			orderKey: "telegram:7001:chat:-1001",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if n.Chat.Type != "channel" || n.Sender != nil || n.Message.Kind != KindText {
					t.Errorf("chat %+v sender %+v message %+v", n.Chat, n.Sender, n.Message)
				}
			},
		},
		{
			name:     "a dice is media dice, not an empty service message",
			update:   `{"update_id":31,"message":{"message_id":7,"from":{"id":42,"is_bot":false,"first_name":"Ann"},"chat":{"id":42,"type":"private"},"date":1771668000,"dice":{"emoji":"🎲","value":4}}}`,
			event:    EventMessageCreated,
			channel:  ChannelTelegramBot,
			msgID:    "7",
			orderKey: "telegram:7001:chat:42",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if n.Message.Kind != KindMedia || n.Message.Media != "dice" || n.Message.Service != "" {
					t.Errorf("message = %+v", n.Message)
				}
			},
		},
		{
			name:     "a venue is media venue though Telegram sets location beside it",
			update:   `{"update_id":32,"message":{"message_id":8,"chat":{"id":42,"type":"private"},"date":1771668000,"location":{"latitude":55.75,"longitude":37.62},"venue":{"location":{"latitude":55.75,"longitude":37.62},"title":"Office","address":"Tverskaya 1"}}}`,
			event:    EventMessageCreated,
			channel:  ChannelTelegramBot,
			msgID:    "8",
			orderKey: "telegram:7001:chat:42",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if n.Message.Media != "venue" {
					t.Errorf("media = %q, want venue", n.Message.Media)
				}
			},
		},
		{
			name:     "a service message names its event",
			update:   `{"update_id":33,"message":{"message_id":9,"from":{"id":42,"is_bot":false,"first_name":"Ann"},"chat":{"id":42,"type":"private"},"date":1771668000,"write_access_allowed":{"from_request":true}}}`,
			event:    EventMessageCreated,
			channel:  ChannelTelegramBot,
			msgID:    "9",
			orderKey: "telegram:7001:chat:42",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if n.Message.Kind != KindService || n.Message.Service != "write_access_allowed" || n.Message.Media != "" {
					t.Errorf("message = %+v", n.Message)
				}
			},
		},
		{
			name:     "a content type newer than this build is media unknown",
			update:   `{"update_id":34,"message":{"message_id":10,"chat":{"id":42,"type":"private"},"date":1771668000,"hologram":{"file_id":"h"}}}`,
			event:    EventMessageCreated,
			channel:  ChannelTelegramBot,
			msgID:    "10",
			orderKey: "telegram:7001:chat:42",
			check: func(t *testing.T, n Normalized, _ *Envelope) {
				if n.Message.Kind != KindMedia || n.Message.Media != MediaUnknown {
					t.Errorf("message = %+v", n.Message)
				}
			},
		},
		{
			name:     "an update type the chat does not use is kept as unknown",
			update:   `{"update_id":21,"poll":{"id":"p","question":"?","options":[],"total_voter_count":0,"is_closed":false,"is_anonymous":true,"type":"regular","allows_multiple_answers":false}}`,
			event:    EventUnknown,
			channel:  ChannelTelegramBot,
			orderKey: "",
			check: func(t *testing.T, n Normalized, env *Envelope) {
				if n.UpdateType != "poll" {
					t.Errorf("updateType = %q, want poll", n.UpdateType)
				}
				if !bytes.Contains(env.PayloadRaw, []byte(`"question":"?"`)) {
					t.Errorf("payloadRaw lost the update: %s", env.PayloadRaw)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := NormalizeTelegram([]byte(tt.update), testBotID, received)
			if err != nil {
				t.Fatalf("normalize: %v", err)
			}
			if env.EventType != tt.event || env.Channel != tt.channel {
				t.Errorf("eventType %q channel %q, want %q %q", env.EventType, env.Channel, tt.event, tt.channel)
			}
			var update struct {
				UpdateID int64 `json:"update_id"`
			}
			_ = json.Unmarshal([]byte(tt.update), &update)
			if want := "telegram:7001:" + itoa(update.UpdateID); env.IdempotencyKey != want {
				t.Errorf("idempotencyKey = %q, want %q", env.IdempotencyKey, want)
			}
			gotMsg := ""
			if env.ProviderMessageID != nil {
				gotMsg = *env.ProviderMessageID
			}
			if gotMsg != tt.msgID {
				t.Errorf("providerMessageId = %q, want %q", gotMsg, tt.msgID)
			}
			if got := OrderingKey(env); got != tt.orderKey {
				t.Errorf("ordering key = %q, want %q", got, tt.orderKey)
			}
			if !env.ReceivedAt.Equal(received) || env.Direction != DirectionInbound || env.Version != 1 {
				t.Errorf("receivedAt %v direction %q version %d", env.ReceivedAt, env.Direction, env.Version)
			}
			if tt.check != nil {
				tt.check(t, env.PayloadNormalized, env)
			}
			raw := requireValidEnvelope(t, env)

			var back Envelope
			if err := json.Unmarshal(raw, &back); err != nil {
				t.Fatalf("unmarshal own envelope: %v", err)
			}
			again, _ := back.Encode()
			if !bytes.Equal(raw, again) {
				t.Errorf("the envelope does not survive a JSON round trip:\n%s\n%s", raw, again)
			}
		})
	}
}

func TestNormalizeTelegramRefusesWhatIsNotAnUpdate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body string }{
		{"an empty body", ``},
		{"text that is not JSON", `not json`},
		{"a JSON array", `[]`},
		{"an object without update_id", `{"message":{}}`},
		{"an update_id that is a string", `{"update_id":"7"}`},
		{"an update_id that is not an integer", `{"update_id":1.5}`},
		{"truncated JSON", `{"update_id":1,`},
		{"an update_id that is null", `{"update_id":null,"message":{}}`},
		{"an update_id spelt in another case", `{"Update_ID":1,"message":{}}`},
		{"a body that is not UTF-8", "{\"update_id\":1,\"message\":{\"text\":\"\xff\"}}"},
		{"JSON null", `null`},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			if _, err := NormalizeTelegram([]byte(tc.body), testBotID, received); !errors.Is(err, ErrBadUpdate) {
				t.Errorf("NormalizeTelegram(%q) error = %v, want ErrBadUpdate", tc.body, err)
			}
		})
	}
}

func TestEnvelopeSchema(t *testing.T) {
	t.Parallel()
	good, err := NormalizeTelegram([]byte(`{"update_id":10,"business_message":{"message_id":5,"from":{"id":42,"is_bot":false,"first_name":"A"},"chat":{"id":42,"type":"private"},"date":1771668000,"business_connection_id":"bc","text":"hi"}}`), testBotID, received)
	if err != nil {
		t.Fatal(err)
	}
	raw := requireValidEnvelope(t, good)

	mutate := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		out, _ := json.Marshal(m)
		return out
	}
	normalized := func(m map[string]any) map[string]any { return m["payloadNormalized"].(map[string]any) }
	t.Run("an invalid business event without its connection id is accepted", func(t *testing.T) {
		env, err := NormalizeTelegram([]byte(`{"update_id":11,"business_message":{"message_id":5,"chat":{"id":42,"type":"private"},"date":1771668000,"text":"hi"}}`), testBotID, received)
		if err != nil {
			t.Fatal(err)
		}
		requireValidEnvelope(t, env)
	})
	for _, tc := range []struct {
		name string
		f    func(m map[string]any)
	}{
		{"an envelope without idempotencyKey is refused", func(m map[string]any) { delete(m, "idempotencyKey") }},
		{"an envelope of another version is refused", func(m map[string]any) { m["version"] = 2 }},
		{"an envelope with a malformed occurredAt is refused", func(m map[string]any) { m["occurredAt"] = "yesterday" }},
		{"an envelope with an unknown eventType is refused", func(m map[string]any) { m["eventType"] = "message.exploded" }},
		{"a message event without providerMessageId is refused", func(m map[string]any) { m["providerMessageId"] = nil }},
		{"a message event without its message is refused", func(m map[string]any) { delete(normalized(m), "message") }},
		{"a business event without its connection id is refused", func(m map[string]any) { delete(normalized(m), "businessConnectionId") }},
		{"an outbound direction is refused", func(m map[string]any) { m["direction"] = "outbound" }},
		{"a raw payload that is not an object is refused", func(m map[string]any) { m["payloadRaw"] = "{}" }},
		{"an extra top-level field is refused", func(m map[string]any) { m["extra"] = true }},
		{"a media message without its media is refused", func(m map[string]any) {
			normalized(m)["message"].(map[string]any)["kind"] = "media"
		}},
		{"a media name the schema does not list is refused", func(m map[string]any) {
			msg := normalized(m)["message"].(map[string]any)
			msg["kind"], msg["media"] = "media", "hologram"
		}},
		{"a text message naming a service is refused", func(m map[string]any) {
			normalized(m)["message"].(map[string]any)["service"] = "new_chat_members"
		}},
		{"an invalid event without its reason is refused", func(m map[string]any) {
			m["eventType"], m["providerMessageId"] = "invalid", nil
			m["payloadNormalized"] = map[string]any{"accountId": "1", "updateType": "business_message"}
		}},
		{"an invalid event carrying a message is refused", func(m map[string]any) {
			m["eventType"], m["providerMessageId"] = "invalid", nil
			normalized(m)["updateType"], normalized(m)["reason"] = "business_message", "no connection"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := validateEnvelopeJSON(t, mutate(tc.f)); err == nil {
				t.Errorf("the schema accepted it")
			}
		})
	}
}

// rewritten is an update whose bytes encoding/json would change: pretty
// whitespace, key order, <, > and & (escaped as \u003c… by json.Marshal),
// U+2028 (escaped), an escaped "\u0416" and "\/" (written out), an integer
// beyond float64's precision, and a trailing newline.
const rewritten = "{\n  \"message\": {\n    \"text\": \"<b>price</b> > 5 & \\u0416\u2028ok \\/ \u00e9\",\n" +
	"    \"chat\": {\"type\": \"private\", \"id\": 42},  \"date\": 1771668000,\n" +
	"    \"message_id\": 9007199254740993, \"from\": {\"is_bot\": false, \"id\": 42, \"first_name\": \"Ann\"}\n  },\n" +
	"  \"update_id\": 860000001\n}\n"

func TestEnvelopeEncode(t *testing.T) {
	t.Parallel()

	t.Run("payloadRaw is the body byte for byte, even where encoding/json would rewrite it", func(t *testing.T) {
		t.Parallel()
		env, err := NormalizeTelegram([]byte(rewritten), testBotID, received)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(env.PayloadRaw, []byte(rewritten)) {
			t.Fatalf("PayloadRaw = %q, want the body", env.PayloadRaw)
		}
		raw := requireValidEnvelope(t, env)
		if !bytes.Contains(raw, []byte(`"payloadRaw":`+rewritten+`,"payloadNormalized":`)) {
			t.Fatalf("the encoded envelope does not carry the body unchanged:\n%s", raw)
		}
		// The same envelope through json.Marshal loses the bytes: this test
		// would see the difference.
		if marshalled, _ := json.Marshal(env); bytes.Contains(marshalled, []byte(rewritten)) {
			t.Fatalf("json.Marshal kept the bytes too; the test body no longer exercises the rewrite")
		}
		back, err := decodeEnvelope(raw)
		if err != nil {
			t.Fatal(err)
		}
		if want := bytes.TrimSpace([]byte(rewritten)); !bytes.Equal(back.PayloadRaw, want) {
			t.Errorf("decoded payloadRaw = %q, want %q", back.PayloadRaw, want)
		}
		if back.PayloadNormalized.Message.Text != "<b>price</b> > 5 & Ж\u2028ok / é" || *back.ProviderMessageID != "9007199254740993" {
			t.Errorf("decoded message %+v id %s", back.PayloadNormalized.Message, *back.ProviderMessageID)
		}
	})

	t.Run("a payload that is not a JSON object is not encoded", func(t *testing.T) {
		t.Parallel()
		for _, raw := range []string{``, `[]`, `{"a":`, "{\"a\":\"\xff\"}"} {
			env := &Envelope{IdempotencyKey: "telegram:1:1", PayloadRaw: json.RawMessage(raw)}
			if _, err := env.Encode(); err == nil {
				t.Errorf("Encode accepted payloadRaw %q", raw)
			}
		}
	})
}

// TestEnvelopeHeadMatchesEnvelope keeps envelopeHead, which Encode writes,
// field for field the Envelope without its payloads.
func TestEnvelopeHeadMatchesEnvelope(t *testing.T) {
	t.Parallel()
	env, head := reflect.TypeFor[Envelope](), reflect.TypeFor[envelopeHead]()
	if env.NumField() != head.NumField()+2 {
		t.Fatalf("Envelope has %d fields, envelopeHead %d: want two fewer (the payloads)", env.NumField(), head.NumField())
	}
	for i := range head.NumField() {
		e, h := env.Field(i), head.Field(i)
		if e.Name != h.Name || e.Type != h.Type || e.Tag != h.Tag {
			t.Errorf("field %d: Envelope has %s %s %s, envelopeHead %s %s %s", i, e.Name, e.Type, e.Tag, h.Name, h.Type, h.Tag)
		}
	}
	if a, b := env.Field(head.NumField()).Name, env.Field(head.NumField()+1).Name; a != "PayloadRaw" || b != "PayloadNormalized" {
		t.Errorf("Envelope ends with %s, %s; want PayloadRaw, PayloadNormalized", a, b)
	}
}

// TestSchemaNamesEveryContentType keeps the schema's media and service names
// the ones the normaliser knows.
func TestSchemaNamesEveryContentType(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defs struct {
			Message struct {
				Properties struct {
					Media   struct{ Enum []string } `json:"media"`
					Service struct{ Enum []string } `json:"service"`
				} `json:"properties"`
			} `json:"message"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if got, want := doc.Defs.Message.Properties.Media.Enum, append(slices.Clone(mediaFields), MediaUnknown); !slices.Equal(got, want) {
		t.Errorf("schema media = %v\nnormaliser knows %v", got, want)
	}
	if got := doc.Defs.Message.Properties.Service.Enum; !slices.Equal(got, serviceFields) {
		t.Errorf("schema service = %v\nnormaliser knows %v", got, serviceFields)
	}
}
