package queue

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

func TestWireNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"q:sender.flow", "t:pin.identity.users.v1", "g:topic\x00group", "q:with space", `q:"quoted"`,
		`q:back\slash`, "q:кириллица", "q:\xff\xfe", "q:",
	} {
		for _, p := range []int{-1, 0, 5, 63, 64, 4000} {
			t.Run(fmt.Sprintf("%q with partition %d travels and comes back", name, p), func(t *testing.T) {
				payload := wireName(name)
				if p >= 0 {
					payload += " " + strconv.Itoa(p)
				}
				got, gotP, ok := parseWire(payload)
				if !ok || got != name || gotP != p {
					t.Errorf("parseWire(%q) = %q, %d, %v; want %q, %d", payload, got, gotP, ok, name, p)
				}
			})
		}
	}
	for _, bad := range []string{"", `"unterminated`, "q:x y", "q:x -1", `"q:x"junk`, "q:x "} {
		if name, p, ok := parseWire(bad); ok {
			t.Errorf("parseWire(%q) = %q, %d, accepted", bad, name, p)
		}
	}
}

// otherHandle opens a second handle on db's database: another instance.
func otherHandle(t testing.TB, db *store.DB) *store.DB {
	t.Helper()
	other, err := store.Open(context.Background(), store.Options{Path: db.Path()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	return other
}

func TestPeerSignals(t *testing.T) {
	t.Parallel()
	const pgOnly = "other instances are woken by LISTEN/NOTIFY; on SQLite they poll"

	t.Run("a publish in another instance marks only its partition for this one's subscribers", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, pgOnly)
		a := storetest.New(t)
		b := otherHandle(t, a)
		ta, err := NewTopic(t.Context(), TopicOpts{DB: a, Name: "t", Partitions: 6})
		if err != nil {
			t.Fatal(err)
		}
		sig := topicSignal(b, "t")
		l := sig.listen()
		defer sig.unlisten(l)
		// Connecting marks every partition (anything may have been missed).
		testwait.Until(t, 10*time.Second, "b listens", func() bool { return b.BroadcastStats().Listens >= 1 })
		l.dirty.Store(0)
		l.woken.Store(false)

		pos, err := ta.Publish(t.Context(), "k", []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "b's listener told", func() bool { return l.woken.Load() })
		if got, want := l.dirty.Load(), uint64(1)<<pos.Partition; got != want {
			t.Errorf("dirty partitions %b, want %b (partition %d only)", got, want, pos.Partition)
		}
	})

	t.Run("a group's wake-up in another instance wakes this one's members of that group only", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, pgOnly)
		a := storetest.New(t)
		b := otherHandle(t, a)
		sig, other := groupSignal(b, "t", "g"), groupSignal(b, "t", "other group")
		testwait.Until(t, 10*time.Second, "b listens", func() bool { return b.BroadcastStats().Listens >= 1 })
		l, lo := sig.listen(), other.listen()
		defer sig.unlisten(l)
		defer other.unlisten(lo)
		woken := sig.wait()

		// What Subscription.announce does when a member joins or hands
		// partitions over, and Admin.Redrive after a redrive.
		groupSignal(a, "t", "g").notify()
		select {
		case <-woken:
		case <-time.After(5 * time.Second * testwait.Slack):
			t.Fatal("the group's members in the other instance were not woken")
		}
		if lo.woken.Load() {
			t.Error("the members of another group were woken too")
		}
	})
}
