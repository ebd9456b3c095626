package fakebot_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/telegram/fakebot"
)

// TestLongPollOutlastsWriteTimeout mounts the fake in a server whose write
// timeout is shorter than the poll, as the sandbox is mounted in
// Switchyard's: getUpdates holds its connection for its own timeout and
// answers after the full wait.
func TestLongPollOutlastsWriteTimeout(t *testing.T) {
	t.Parallel()
	fake := fakebot.New(fakebot.Opts{})
	ts := httptest.NewUnstartedServer(fake)
	ts.Config.WriteTimeout = 300 * time.Millisecond
	ts.Config.ReadTimeout = 300 * time.Millisecond
	ts.Start()
	t.Cleanup(ts.Close)
	t.Cleanup(fake.Close)

	bot := client(t, ts.URL, 12)
	start := time.Now()
	ups, err := bot.GetUpdates(ctxFor(t, 30*time.Second), &telego.GetUpdatesParams{Timeout: 2})
	if err != nil {
		t.Fatalf("the poll failed after %v: %v", time.Since(start), err)
	}
	if took := time.Since(start); len(ups) != 0 || took < 2*time.Second {
		t.Fatalf("%d updates after %v, want none after the full 2 s", len(ups), took)
	}
}
