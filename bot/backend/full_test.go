package backend

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"switchyard/store/storetest"
)

func TestFullDatabase(t *testing.T) {
	t.Parallel()

	t.Run("emits and backend actions answer 5xx while the database is full and store nothing, and succeed once room is back", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		u := e.createUser(t, "full-user", "7001")
		admin := func(method, path string, body any) (int, []byte) {
			return e.request(t, method, "/admin/api"+path, "", body)
		}
		// Each request writes something new every time it is sent.
		requests := []struct {
			name, path string
			body       func(i int) any
			ok         int
		}{
			{"a raw emit", "/bot/events", func(i int) any {
				return map[string]any{"eventType": "reactivation", "telegramId": "7001", "payload": map[string]int{"days": i}}
			}, 201},
			{"a wallet connection", fmt.Sprintf("/users/%d/wallet", u.UID), func(i int) any {
				return map[string]string{"addr": fmt.Sprintf("EQDk2VTvn04SUKJrW7rXahzdF8_Qi6utb0wj43InCu9vdj%02d", i)}
			}, 200},
			{"a new user", "/users", func(i int) any {
				return map[string]string{"link": fmt.Sprintf("user-%d", i), "name": strings.Repeat("N", 200)}
			}, 201},
		}
		makeRoom := storetest.FillUp(t, e.db, false)
		before := e.countEvents(t)
		for _, r := range requests {
			// The first few may still fit in pages with room left; each
			// answer is either a success that is stored or a 5xx that
			// stored nothing, and the database soon refuses.
			refused := false
			for i := 0; i < 50 && !refused; i++ {
				events := e.countEvents(t)
				status, body := admin(http.MethodPost, r.path, r.body(i))
				switch {
				case status == r.ok:
					if r.ok == 201 && r.path == "/bot/events" && e.countEvents(t) != events+1 {
						t.Fatalf("%s answered %d but is not stored", r.name, status)
					}
				case status >= 500:
					if errorCode(t, body) == "" || e.countEvents(t) != events {
						t.Fatalf("%s answered %d but changed the outbox", r.name, status)
					}
					refused = true
				default:
					t.Fatalf("%s on a full database: %d %s, want %d or a 5xx", r.name, status, body, r.ok)
				}
			}
			if !refused {
				t.Fatalf("%s was never refused on a full database", r.name)
			}
		}
		pending := e.pending(t, "?limit=1000")
		if len(pending) != e.countEvents(t) {
			t.Fatalf("pending on a full database lists %d events, want the %d stored", len(pending), e.countEvents(t))
		}

		makeRoom()
		for _, r := range requests {
			if status, body := admin(http.MethodPost, r.path, r.body(100)); status != r.ok {
				t.Fatalf("%s with room again: %d %s, want %d", r.name, status, body, r.ok)
			}
		}
		if after := e.countEvents(t); after <= before {
			t.Fatalf("%d events after the emits succeeded, %d before", after, before)
		}
	})
}
