package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"switchyard/testwait"
)

// The consumer group the referral role subscribes with is the application's
// own: while the role runs, an operator's delete is refused; deleted while
// it is stopped, the group is created again when the role starts, at its
// start position (the earliest retained record).
func TestAdminGroupOfARunningRole(t *testing.T) {
	t.Parallel()
	w := newWiredApp(t, walkSecrets, nil)
	groups := w.srv.URL + "/admin/api/topics/pin.identity.users.v1/groups"
	do := func(method, url string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+w.sec.AdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	referral := func() (listed, active bool) {
		t.Helper()
		status, body := do(http.MethodGet, groups)
		var list struct {
			Groups []struct {
				Group  string `json:"group"`
				Active bool   `json:"active"`
			} `json:"groups"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &list) != nil {
			t.Fatalf("GET groups: %d %s", status, body)
		}
		for _, g := range list.Groups {
			if g.Group == "referral-identity-users" {
				return true, g.Active
			}
		}
		return false, false
	}
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, wk := range w.app.workers {
			wg.Go(func() { _ = wk.Run(ctx) })
		}
		stop = sync.OnceFunc(func() {
			cancel()
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Error("the workers did not stop within 20 s")
			}
		})
		t.Cleanup(stop)
		return stop
	}

	stop := run()
	testwait.Until(t, 20*time.Second, "the referral role holds its consumer group", func() bool {
		_, active := referral()
		return active
	})
	if status, body := do(http.MethodDelete, groups+"/referral-identity-users"); status != http.StatusConflict || errorCode(body) != "group_active" {
		t.Fatalf("delete while the role runs: %d %s, want 409 group_active", status, body)
	}
	stop()

	if status, body := do(http.MethodDelete, groups+"/referral-identity-users"); status != http.StatusNoContent {
		t.Fatalf("delete while the role is stopped: %d %s, want 204", status, body)
	}
	if listed, _ := referral(); listed {
		t.Fatal("the deleted group is still listed")
	}
	run()
	testwait.Until(t, 20*time.Second, "the role created its group again", func() bool {
		listed, _ := referral()
		return listed
	})
}
