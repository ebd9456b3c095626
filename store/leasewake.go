package store

import "sync"

// leaseWakes tell the standbys of this process that a holder here released
// a lease, so that one takes it at once instead of at its next look (up to
// a second on): the onboarding bot's cron drain hands the outbox lease back
// to the bot's own long-polling loop this way. Standbys in other processes
// still find a release at their next look.
type leaseWakes struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

// wait returns a channel that is closed at the next release of the lease
// name in this process. Take it before looking at the lease, so that a
// release between the look and the wait is not missed.
func (w *leaseWakes) wait(name string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = map[string]chan struct{}{}
	}
	ch, ok := w.ch[name]
	if !ok {
		ch = make(chan struct{})
		w.ch[name] = ch
	}
	return ch
}

// released wakes the standbys of the lease name.
func (w *leaseWakes) released(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.ch[name]; ok {
		close(ch)
		delete(w.ch, name)
	}
}
