package telegram_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mymmrac/telego"
	"golang.org/x/time/rate"

	"switchyard/telegram"
	"switchyard/telegram/fakebot"
)

// BenchmarkLimiterTake measures a Take (chat and bot buckets, map lookups,
// the lock) against a bare rate.Limiter.AllowN in the same run.
func BenchmarkLimiterTake(b *testing.B) {
	chats := make([]telegram.Chat, 1024)
	for i := range chats {
		chats[i] = telegram.Chat{Bot: int64(i % 4), ID: int64(i)}
	}
	inf := telegram.Limit{Rate: 1e12, Burst: 1} // never refuses: measure the bookkeeping, not refusals
	l := telegram.NewLimiter(telegram.Limits{Chat: inf, Group: inf, Bot: inf})
	base := rate.NewLimiter(1e12, 1)
	now := time.Now()

	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		base.AllowN(now.Add(time.Duration(i)), 1)
	}
	baseline := time.Since(start)
	start = time.Now()
	for i := range b.N {
		l.Take(chats[i%len(chats)], now.Add(time.Duration(i)))
	}
	took := time.Since(start)
	b.ReportMetric(float64(took.Nanoseconds())/float64(b.N), "take-ns/op")
	b.ReportMetric(float64(baseline.Nanoseconds())/float64(b.N), "allow-ns/op")
	b.ReportMetric(float64(took)/float64(baseline), "x-baseline")
}

// BenchmarkPacedSends sends b.N messages through telegram.NewBot to a fake
// that enforces the default limits, paced by a Limiter with the same limits
// (the sender sleeps until the time Take names, as a rescheduled job would
// wait). It reports the rate achieved as a share of the bot limit, and the
// 429s the fake answered, which must be zero. Run with e.g. -benchtime=150x.
func BenchmarkPacedSends(b *testing.B) {
	limits := telegram.DefaultLimits()
	fake := fakebot.New(fakebot.Opts{Limits: &limits})
	ts := httptest.NewServer(fake)
	defer ts.Close()
	defer fake.Close()
	token := fakebot.Token(90)
	fb := fake.Bot(token)
	const users = 60
	for i := range users {
		if _, err := fb.Start(telego.User{ID: int64(1000 + i), FirstName: "User"}, ""); err != nil {
			b.Fatal(err)
		}
	}
	bot, err := telegram.NewBot(token, ts.URL)
	if err != nil {
		b.Fatal(err)
	}
	l := telegram.NewLimiter(limits)
	ctx := b.Context()

	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		chat := telegram.Chat{Bot: 90, ID: int64(1000 + i%users)}
		for {
			at, ok := l.Take(chat, time.Now())
			if ok {
				break
			}
			time.Sleep(time.Until(at))
		}
		if _, err := bot.SendMessage(ctx, &telego.SendMessageParams{ChatID: telego.ChatID{ID: chat.ID}, Text: "hi"}); err != nil {
			if f := telegram.Classify(err); f.Class != telegram.ClassRetryAfter {
				b.Fatal(err)
			}
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	perSecond := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(perSecond, "msgs/s")
	b.ReportMetric(100*perSecond/float64(limits.Bot.Rate), "%-of-limit")
	b.ReportMetric(float64(fake.RateLimited()), "429s")
}
