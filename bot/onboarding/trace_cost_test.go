package onboarding

import (
	"context"
	"testing"

	"switchyard/bot/contract"
	"switchyard/queue"
	"switchyard/telemetry"
)

// TestSpansCostNothingWithTracingOff: with no provider installed (tracing
// off, the default), the spans of an event's handling, a DM's attempt and an
// update's handling allocate nothing — their attributes are not even built.
// Not parallel: AllocsPerRun counts the whole process's allocations.
func TestSpansCostNothingWithTracingOff(t *testing.T) {
	if telemetry.Enabled() {
		t.Skip("a provider is installed")
	}
	ctx := context.Background()
	tg, uid := contract.TelegramID("6001"), contract.UID(7)
	ev := contract.Event{ID: 12, EventType: contract.EventNewPartner, TelegramID: &tg, MagnetUID: &uid,
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	d := dm{Key: "event:12:dm", Method: methodSendMessage, ChatID: tg, Phase: phaseTelegram, Traceparent: ev.Traceparent}
	m := queue.Message{ID: "o_1", Attempt: 1}
	su := storedUpdate{ID: 3, ChatID: "6001", Kind: "message", Traceparent: ev.Traceparent}
	o := &Bot{}
	for name, f := range map[string]func(){
		"bot.event.handle": func() {
			_, span := o.handleSpan(ctx, ev)
			endHandle(span, eventResult{Outcome: outcomeHandled}, true, nil, nil)
		},
		"bot.dm.send": func() {
			_, span := sendSpan(ctx, m, d)
			endSend(span, outcomeSent, nil)
		},
		"bot.update.handle": func() {
			_, span := o.updateSpan(ctx, su)
			telemetry.End(span, nil)
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %.0f times per run with tracing off", name, n)
		}
	}
}
