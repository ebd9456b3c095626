package switchyardtest_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
)

// fakeT is a switchyardtest.T outside a test: for the examples, which have
// no *testing.T, and for the tests of the kit's own failures. Fatalf and
// Errorf record the message; Fatalf then stops the caller (run recovers).
type fakeT struct {
	mu       sync.Mutex
	failures []string
	cleanups []func()
}

// fatal is what Fatalf panics with, for run to recover; unrecovered (in
// an example) the panic prints it.
type fatal struct{ msg string }

func (f fatal) Error() string { return f.msg }

func (t *fakeT) Helper()                      {}
func (t *fakeT) Context() context.Context     { return context.Background() }
func (t *fakeT) Output() io.Writer            { return io.Discard }
func (t *fakeT) Cleanup(f func())             { t.cleanups = append(t.cleanups, f) }
func (t *fakeT) Errorf(f string, args ...any) { t.fail(fmt.Sprintf(f, args...)) }

func (t *fakeT) Fatalf(f string, args ...any) {
	msg := fmt.Sprintf(f, args...)
	t.fail(msg)
	panic(fatal{msg})
}

func (t *fakeT) fail(msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failures = append(t.failures, msg)
}

func (t *fakeT) TempDir() string {
	dir, err := os.MkdirTemp("", "switchyardtest-")
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// run calls f with t and returns the message of the Fatalf that stopped
// it, "" when none did.
func (t *fakeT) run(f func(t *fakeT)) (fatalMsg string) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			fatalMsg = f.msg
		}
	}()
	f(t)
	return ""
}

// done runs the cleanups, the last registered first, as a test's end does,
// and returns every failure recorded.
func (t *fakeT) done() []string {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failures
}
