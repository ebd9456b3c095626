package testwait_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/testwait"
)

// recorder stands in for a test, to see how Until fails one.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestUntil(t *testing.T) {
	t.Parallel()
	t.Run("it returns once the condition holds", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int32
		r := &recorder{TB: t}
		testwait.Until(r, time.Minute, "three checks", func() bool { return n.Add(1) == 3 })
		if r.failed != "" || n.Load() != 3 {
			t.Fatalf("failed %q after %d checks, want success on the third", r.failed, n.Load())
		}
	})
	t.Run("it fails the test at the deadline, with what it waited for and the state", func(t *testing.T) {
		t.Parallel()
		r := &recorder{TB: t}
		start := time.Now()
		testwait.Until(r, 10*time.Millisecond, "a condition that never holds", func() bool { return false },
			func() string { return "the state then" })
		if took := time.Since(start); took < 10*time.Millisecond*testwait.Slack {
			t.Errorf("gave up after %s, before its deadline of %s", took, 10*time.Millisecond*testwait.Slack)
		}
		for _, want := range []string{"a condition that never holds", "the state then"} {
			if !strings.Contains(r.failed, want) {
				t.Errorf("failure %q does not say %q", r.failed, want)
			}
		}
	})
}

func TestBuffer(t *testing.T) {
	t.Parallel()
	var b testwait.Buffer
	done := make(chan struct{})
	for i := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			fmt.Fprintf(&b, "{\"n\":%d}\n", i)
		}()
	}
	for range 4 {
		<-done
	}
	fmt.Fprintln(&b, "not json")
	if n := len(b.Lines()); n != 4 {
		t.Fatalf("%d JSON lines of %q, want 4", n, b.String())
	}
	if !strings.Contains(b.String(), "not json") {
		t.Fatalf("String lost a line: %q", b.String())
	}
}
