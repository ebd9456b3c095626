package queue

import (
	"testing"
	"time"
)

// Backoff is the project's one backoff (the onboarding bot's DMs and omni's
// outbound sends use it too): MinBackoff doubled per failed attempt, capped
// at MaxBackoff, spread by [0.75, 1.25).
func TestBackoff(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{MinBackoff: time.Second, MaxBackoff: 10 * time.Second}
	for _, tt := range []struct {
		attempt int
		base    time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 8 * time.Second}, {5, 10 * time.Second}, {50, 10 * time.Second}} {
		lo, hi := time.Duration(float64(tt.base)*0.75), time.Duration(float64(tt.base)*1.25)
		spread := map[time.Duration]bool{}
		for range 200 {
			d := p.Backoff(tt.attempt)
			if d < lo || d >= hi {
				t.Fatalf("attempt %d: %v outside [%v, %v)", tt.attempt, d, lo, hi)
			}
			spread[d] = true
		}
		if len(spread) < 2 {
			t.Fatalf("attempt %d: no jitter", tt.attempt)
		}
	}
	if d := (RetryPolicy{}).Backoff(1); d < time.Duration(float64(DefaultMinBackoff)*0.75) || d >= time.Duration(float64(DefaultMinBackoff)*1.25) {
		t.Fatalf("the zero policy's first backoff %v, want about %v", d, DefaultMinBackoff)
	}
}
