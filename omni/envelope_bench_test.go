package omni

import (
	"testing"
	"time"
)

// loadtestUpdate is a business message as `switchyard loadtest` sends it.
const loadtestUpdate = `{"business_message":{"business_connection_id":"loadtest-business","chat":{"first_name":"Покупатель","id":8000000007,"last_name":"7","type":"private","username":"customer_8000000007"},"date":1771668000,"from":{"first_name":"Покупатель","id":8000000007,"is_bot":false,"language_code":"ru","last_name":"7","username":"customer_8000000007"},"message_id":1764000000123,"text":"Здравствуйте! Вопрос по заказу №123: когда доставка?"},"update_id":1764000000123}`

// BenchmarkNormalizeTelegram and BenchmarkEnvelopeEncode are the webhook's
// two steps between reading the body and the enqueue:
//
//	go test -run '^$' -bench 'NormalizeTelegram|EnvelopeEncode' -benchmem ./omni/
func BenchmarkNormalizeTelegram(b *testing.B) {
	body := []byte(loadtestUpdate)
	at := time.Date(2026, 2, 21, 10, 0, 0, 123456000, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NormalizeTelegram(body, inboxBotID, at); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnvelopeEncode(b *testing.B) {
	env, err := NormalizeTelegram([]byte(loadtestUpdate), inboxBotID, time.Date(2026, 2, 21, 10, 0, 0, 123456000, time.UTC))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := env.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}
