package omni

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
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

// requireValidEnvelope marshals env and fails the test if the schema refuses it.
func requireValidEnvelope(t testing.TB, env *Envelope) []byte {
	t.Helper()
	raw, err := json.Marshal(env)
	if err != nil {
		t.Fatalf("marshal envelope: %v", err)
	}
	if err := validateEnvelopeJSON(t, raw); err != nil {
		t.Fatalf("envelope does not match the v1 schema: %v\n%s", err, raw)
	}
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
			again, _ := json.Marshal(&back)
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := validateEnvelopeJSON(t, mutate(tc.f)); err == nil {
				t.Errorf("the schema accepted it")
			}
		})
	}
}
