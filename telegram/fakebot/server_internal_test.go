package fakebot

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestPanicReleasesTheLock is not parallel: it adds a method to the shared
// table, which parallel tests read, and removes it before they start.
func TestPanicReleasesTheLock(t *testing.T) {
	methods["panicnow"] = method{"panicNow", func(*Server, *botState, params) answer { panic("a bug in a handler") }}
	defer delete(methods, "panicnow")

	fake := New(Opts{})
	ts := httptest.NewUnstartedServer(fake)
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // net/http logs the recovered panic
	ts.Start()
	base := ts.URL + "/bot" + Token(1)

	if res, err := http.Post(base+"/panicNow", "application/json", nil); err == nil {
		_ = res.Body.Close()
		t.Fatalf("a panicking method answered %d", res.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/getMe", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		// Closing would wait for the call stuck on the lock: leave both.
		t.Fatalf("the fake stopped answering after a handler panicked: %v", err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("getMe after the panic: %d", res.StatusCode)
	}
	ts.Close()
	fake.Close()
}
