package fakebot

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Call is one Bot API call the fake answered.
type Call struct {
	Seq    int // 1, 2, … in arrival order of answers
	Token  string
	BotID  int64
	Method string // canonical spelling, e.g. "sendMessage"
	Params map[string]string
	At     time.Time // when the answer was given, on the fake's clock
	OK     bool
	// ErrorCode, Description and RetryAfter are the error answer's fields.
	ErrorCode   int
	Description string
	RetryAfter  int
	// Result is the JSON of the result of a successful call.
	Result json.RawMessage
	// Fault is the injected fault that shaped the answer, if any.
	Fault FaultKind
}

// Decode unmarshals the call's result into v, e.g. a *telego.Message.
func (c Call) Decode(v any) error {
	if !c.OK {
		return fmt.Errorf("fakebot: call %d %s failed: %d %s", c.Seq, c.Method, c.ErrorCode, c.Description)
	}
	return json.Unmarshal(c.Result, v)
}

// record appends the call to the log and returns the answer's body.
func (s *Server) record(token string, botID int64, method string, p params, ans answer, fault FaultKind) []byte {
	body, result := encodeAnswer(ans)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callSeq++
	c := Call{
		Seq: s.callSeq, Token: token, BotID: botID, Method: method,
		Params: maps.Clone(map[string]string(p)), At: s.now(), OK: ans.err == nil,
		Result: result, Fault: fault,
	}
	if ans.err != nil {
		c.ErrorCode, c.Description, c.RetryAfter = ans.err.code, ans.err.description, ans.err.retryAfter
	}
	if len(s.calls) >= s.opts.MaxCalls {
		// Drop the oldest tenth at once so a full log costs one copy per
		// many calls, not one per call.
		drop := len(s.calls) - s.opts.MaxCalls + 1 + s.opts.MaxCalls/10
		s.calls = append(s.calls[:0], s.calls[min(drop, len(s.calls)):]...)
	}
	s.calls = append(s.calls, c)
	s.signal()
	return body
}

// Calls returns every recorded call, oldest first.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneCalls(s.calls, "")
}

// CallsTo returns the recorded calls of method (any spelling), oldest first.
func (s *Server) CallsTo(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneCalls(s.calls, method)
}

func cloneCalls(calls []Call, method string) []Call {
	var out []Call
	for _, c := range calls {
		if method == "" || strings.EqualFold(c.Method, method) {
			c.Params = maps.Clone(c.Params)
			out = append(out, c)
		}
	}
	return out
}

// WaitUntil returns once cond reports true, re-checking it after every change
// of the fake's state (a call, a user's action, a webhook delivery), or the
// ctx error when ctx ends first. cond runs without the fake's lock held and
// may call any of its methods.
func (s *Server) WaitUntil(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("fakebot: wait: %w", ctx.Err())
		}
	}
}

// WaitCalls waits until at least n calls to method ("" for any) were
// recorded and returns all of them, or fails when ctx ends first.
func (s *Server) WaitCalls(ctx context.Context, method string, n int) ([]Call, error) {
	var calls []Call
	err := s.WaitUntil(ctx, func() bool {
		calls = s.CallsTo(method)
		return len(calls) >= n
	})
	if err != nil {
		return calls, fmt.Errorf("fakebot: %d of %d calls to %q: %w", len(calls), n, method, err)
	}
	return calls, nil
}

// PeakCalls is the most calls in any window of the given length, and when
// that window began: what a test compares with Telegram's rate limits.
func PeakCalls(calls []Call, window time.Duration) (int, time.Time) {
	times := make([]time.Time, len(calls))
	for i, c := range calls {
		times[i] = c.At
	}
	slices.SortFunc(times, time.Time.Compare)
	peak, at, j := 0, time.Time{}, 0
	for i := range times {
		for times[i].Sub(times[j]) >= window {
			j++
		}
		if n := i - j + 1; n > peak {
			peak, at = n, times[j]
		}
	}
	return peak, at
}
