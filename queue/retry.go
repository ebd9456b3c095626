package queue

import (
	"math/rand/v2"
	"time"
)

// RetryPolicy says how often and how soon a failed message is tried again.
// Zero fields get the defaults; the default schedule is documented on Backoff.
type RetryPolicy struct {
	// MaxAttempts is how many times a message is handled before it is
	// dead-lettered (default 10). A permanent error dead-letters at once.
	MaxAttempts int
	// MinBackoff is the delay after the first failure (default 1 s).
	MinBackoff time.Duration
	// MaxBackoff caps the delay (default 15 min).
	MaxBackoff time.Duration
}

// Retry defaults.
const (
	DefaultMaxAttempts = 10
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = 15 * time.Minute
)

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.MinBackoff <= 0 {
		p.MinBackoff = DefaultMinBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultMaxBackoff
	}
	p.MaxBackoff = max(p.MaxBackoff, p.MinBackoff)
	return p
}

// Backoff is the delay after the given failed attempt (1-based): MinBackoff
// doubled per attempt, capped at MaxBackoff, then spread by a random factor in
// [0.75, 1.25) so that messages that failed together do not return together.
// With the defaults: about 1 s, 2 s, 4 s, 8 s, 16 s, 32 s, 64 s, 128 s, 256 s,
// then dead after the 10th attempt (about 8.5 minutes in all); the cap of
// 15 min is reached from the 11th attempt when MaxAttempts is raised.
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	p = p.withDefaults()
	d := p.MinBackoff
	for i := 1; i < attempt && d < p.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, p.MaxBackoff)
	return time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
}
