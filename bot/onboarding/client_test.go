package onboarding

import (
	"context"
	"errors"
	"testing"
	"time"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
)

func TestBackendClient(t *testing.T) {
	t.Parallel()
	e := newOnbEnv(t, func(o *onbEnvOpts) { o.manualClock = true })
	ctx := context.Background()
	c := NewBackendClient(e.srv.URL+"/", backendTestSecret, e.srv.Client())

	t.Run("drains events through pending and ack", func(t *testing.T) {
		// The third event is another user's: user 1's later events would
		// wait behind the retried one.
		ids := append(emitMany(t, e.be.Outbox(), 2, backend.Target{MagnetUID: 1}), emitMany(t, e.be.Outbox(), 1, backend.Target{MagnetUID: 2})...)
		events, err := c.Pending(ctx, 2, 0)
		if err != nil || len(events) != 2 || events[0].ID != ids[0] || events[0].UserKey() != "uid:1" || events[0].EventType != contract.EventStatusNftActivated {
			t.Fatalf("pending %+v, %v", events, err)
		}
		res, err := c.Ack(ctx, contract.AckRequest{ProcessedIDs: []contract.EventID{ids[0]}, RetryIDs: []contract.EventID{ids[1]}})
		if err != nil || res != (contract.AckResult{Processed: 1, Retried: 1}) {
			t.Fatalf("ack %+v, %v", res, err)
		}
		events, err = c.Pending(ctx, 0, time.Second)
		if err != nil || len(events) != 1 || events[0].ID != ids[2] {
			t.Fatalf("pending %+v, %v", events, err)
		}
		if _, err := c.Ack(ctx, contract.AckRequest{ProcessedIDs: []contract.EventID{ids[2]}}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("calls the service endpoints", func(t *testing.T) {
		leader := e.createUser("leader", "Лидия", "")
		u := e.createUser("alice", "Алиса", "")
		l, err := c.ResolveLeader(ctx, "leader")
		if err != nil || l.UID != leader.UID {
			t.Fatalf("resolve %+v, %v", l, err)
		}
		link, err := c.ConnectLink(ctx, u.UID)
		if err != nil {
			t.Fatal(err)
		}
		if red, err := c.RedeemConnect(ctx, link.StartParam, "1234"); err != nil || red.UID != u.UID {
			t.Fatalf("redeem %+v, %v", red, err)
		}
		if res, err := c.BindTelegram(ctx, u.UID, "1234"); err != nil || res.TelegramID != "1234" {
			t.Fatalf("bind %+v, %v", res, err)
		}
		if st, err := c.UserState(ctx, "1234"); err != nil || st.OwnLink != "alice" {
			t.Fatalf("state %+v, %v", st, err)
		}
		if chk, err := c.CheckAccountByTelegram(ctx, "1234"); err != nil || !chk.Exists || *chk.UID != u.UID {
			t.Fatalf("check %+v, %v", chk, err)
		}
		if n, err := c.AddNotification(ctx, contract.NewNotification{TelegramID: "1234", Kind: "k", Text: "t"}); err != nil || n.UID != u.UID {
			t.Fatalf("notification %+v, %v", n, err)
		}
	})

	t.Run("maps error codes back to domain errors", func(t *testing.T) {
		_, err := c.UserState(ctx, "999")
		var apiErr *APIError
		if !errors.Is(err, contract.ErrUserNotFound) || errors.Is(err, contract.ErrLeaderNotFound) || !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Temporary() {
			t.Fatalf("err %v", err)
		}
		if _, err := c.ResolveLeader(ctx, "nobody"); !errors.Is(err, contract.ErrLeaderNotFound) {
			t.Fatalf("err %v", err)
		}
		wrong := NewBackendClient(e.srv.URL, "wrong", e.srv.Client())
		if _, err := wrong.Pending(ctx, 0, 0); !errors.Is(err, contract.ErrUnauthorized) {
			t.Fatalf("err %v", err)
		}
	})
}
