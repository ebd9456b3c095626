package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// MaxTallyCustomers bounds Opts.Customers with Opts.Tally: the tally reads
// every customer's thread from one page of the operators' thread list (the
// 500 latest), which must also hold the probe's thread.
const MaxTallyCustomers = 400

// Tally is what a run's accepted requests did, counted after the drain
// through the instance's public APIs, so that nothing retention removes
// (chat messages, processed outbox rows, consumed topic records) is needed
// to count it. Lost is what was accepted and has no effect; Doubled what
// took effect more than once.
type Tally struct {
	// Drained is whether every path caught up within Opts.Drain; when not,
	// what is still queued counts as lost.
	Drained bool          `json:"drained"`
	Webhook *WebhookTally `json:"webhook,omitempty"`
	Outbox  *OutboxTally  `json:"outbox,omitempty"`
	Topic   *TopicTally   `json:"topic,omitempty"`
}

// WebhookTally counts the business messages stored: for each customer, its
// thread's unread count (raised by one, in the transaction that stores an
// inbound message, and not lowered by anything the load does, nor by the
// retention of messages) must have grown by the updates answered 200 for
// that customer in this run. The probe's messages are not counted.
type WebhookTally struct {
	Accepted int64 `json:"accepted"` // updates answered 200
	Stored   int64 `json:"stored"`   // the customers' unread counts' growth
	Missing  int64 `json:"missing"`  // accepted and not stored, summed per customer
	Extra    int64 `json:"extra"`    // stored beyond what was accepted, summed per customer
	Chats    int   `json:"chats"`    // customers written to
	// NoThread counts customers written to whose thread is not in the list
	// (their updates count as missing).
	NoThread int `json:"noThread"`
}

// OutboxTally counts the emitted events the run's own consumer of the
// /bot/* contract received and acknowledged.
type OutboxTally struct {
	Emitted      int64 `json:"emitted"`      // emits answered 201
	Acknowledged int64 `json:"acknowledged"` // of those, delivered and acknowledged
	Missing      int64 `json:"missing"`      // emitted and never delivered
	// Repeated counts deliveries of an event after its acknowledgement
	// was answered (any event, the run's or not).
	Repeated int64 `json:"repeated"`
}

// TopicTally counts the identity users of a soak's topic path
// (SoakTopicPlan): each one's replica must be at the newest version
// published for it and answered 202 or later, and each has exactly one bond,
// through the run's first link.
type TopicTally struct {
	Published int64 `json:"published"` // publishes answered 202
	Users     int   `json:"users"`     // users published
	Current   int   `json:"current"`   // replica at the newest version accepted, or later
	Behind    int   `json:"behind"`    // replica missing or older
	Bonded    int   `json:"bonded"`    // exactly one bond, through the first link
	Unbonded  int   `json:"unbonded"`  // no bond, or one to somebody else
	Rebonded  int   `json:"rebonded"`  // more than one bond
	// Lag is the referral group's lag on the topic at the end (not
	// drained when above 0).
	Lag int64 `json:"lag"`
}

// Lost is every accepted request without its effect.
func (t *Tally) Lost() int64 {
	var n int64
	if t.Webhook != nil {
		n += t.Webhook.Missing
	}
	if t.Outbox != nil {
		n += t.Outbox.Missing
	}
	if t.Topic != nil {
		n += int64(t.Topic.Behind + t.Topic.Unbonded)
	}
	return n
}

// Doubled is every effect that happened more than once.
func (t *Tally) Doubled() int64 {
	var n int64
	if t.Webhook != nil {
		n += t.Webhook.Extra
	}
	if t.Outbox != nil {
		n += t.Outbox.Repeated
	}
	if t.Topic != nil {
		n += int64(t.Topic.Rebonded)
	}
	return n
}

// Print writes the tally, one line a path, saying exactly what was counted.
func (t *Tally) Print(w io.Writer) {
	fmt.Fprintf(w, "\nnothing lost? (counted after the drain; drained: %v)\n", t.Drained)
	if h := t.Webhook; h != nil {
		fmt.Fprintf(w, "%-8s %d updates answered 200 to %d customers; their threads' unread counts grew by %d: %d missing, %d extra, %d threads not found\n",
			PathWebhook, h.Accepted, h.Chats, h.Stored, h.Missing, h.Extra, h.NoThread)
	}
	if o := t.Outbox; o != nil {
		fmt.Fprintf(w, "%-8s %d emits answered 201; %d delivered to the consumer and acknowledged, %d never delivered; %d deliveries after an acknowledgement\n",
			PathOutbox, o.Emitted, o.Acknowledged, o.Missing, o.Repeated)
	}
	if p := t.Topic; p != nil {
		fmt.Fprintf(w, "%-8s %d publishes answered 202 for %d users; replica current %d, behind %d; one bond through the first link %d, none %d, several %d; group lag %d\n",
			PathTopic, p.Published, p.Users, p.Current, p.Behind, p.Bonded, p.Unbonded, p.Rebonded, p.Lag)
	}
	verdict := "nothing lost, nothing doubled"
	if t.Lost() > 0 || t.Doubled() > 0 || !t.Drained {
		verdict = fmt.Sprintf("LOST %d, DOUBLED %d", t.Lost(), t.Doubled())
	}
	fmt.Fprintln(w, verdict)
}

// idSet is a set of dense positive ids (outbox event ids), a bit each.
type idSet struct{ words map[int64]uint64 }

func (s *idSet) add(id int64) {
	if s.words == nil {
		s.words = map[int64]uint64{}
	}
	s.words[id>>6] |= 1 << (id & 63)
}

func (s *idSet) has(id int64) bool { return s.words[id>>6]&(1<<(id&63)) != 0 }

// forEach runs fn for each of n items from at most 8 goroutines at once,
// and returns the first error.
func forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range min(8, n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// getStatus is a GET through the admin API that tells a 404 (ok false)
// from an error.
func getStatus(ctx context.Context, api *client, path string, out any) (bool, error) {
	err := api.adminDo(ctx, http.MethodGet, path, nil, out)
	if se := (statusError{}); errors.As(err, &se) && se.code == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}
