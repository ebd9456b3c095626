// Package clock serves the movable clock of an instance started with
// --clock manual, for integration tests only: the store's clock
// (store.ManualClock) stands still until a test moves it forward through
// the admin API, and everything that goes by the store's time — the bot
// outbox's retries, queue delays, backoffs and visibility timeouts, leases,
// prunes, rollups and schedules — follows it (docs/testing.md, "A movable clock").
//
//	GET  /admin/api/clock           {"now": "…"}
//	POST /admin/api/clock/advance   {"by": "10m"} → {"now": "…", "advancedBy": "10m0s"}
//
// The routes exist only on an instance with a manual clock; elsewhere they
// are 404s.
package clock

import (
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"switchyard/httpjson"
	"switchyard/store"
)

// API is the movable clock's admin API.
type API struct {
	db    *store.DB
	clock *store.ManualClock
	// mu makes an advance one step: the time it answers is the time it set.
	mu sync.Mutex
}

// New returns the API of db's clock. A database whose clock is not a
// store.ManualClock is a wiring mistake and panics.
func New(db *store.DB) *API {
	c, ok := db.Clock.(*store.ManualClock)
	if !ok {
		panic("clock: New needs a database on a manual clock")
	}
	return &API{db: db, clock: c}
}

// AdminRoutes mounts the clock's routes on r, the /admin/api subrouter
// behind the admin token.
func (a *API) AdminRoutes(r *mux.Router) {
	r.Handle("/clock", httpjson.HandlerFunc(a.handleGet)).Methods(http.MethodGet)
	r.Handle("/clock/advance", httpjson.HandlerFunc(a.handleAdvance)).Methods(http.MethodPost)
}

// Time is the body of GET /admin/api/clock and of an advance's answer.
type Time struct {
	Now time.Time `json:"now"`
	// AdvancedBy is the move an advance made, as Go writes a duration.
	AdvancedBy string `json:"advancedBy,omitempty"`
}

// AdvanceRequest is the body of POST /admin/api/clock/advance: by is a Go
// duration ("90s", "10m", "24h"), positive — the clock only goes forward.
type AdvanceRequest struct {
	By string `json:"by"`
}

func (a *API) handleGet(w http.ResponseWriter, _ *http.Request) error {
	httpjson.Write(w, http.StatusOK, Time{Now: a.clock.Now()})
	return nil
}

// maxYear is the last year a time of the store can be written in.
const maxYear = 9999

func (a *API) handleAdvance(w http.ResponseWriter, r *http.Request) error {
	var req AdvanceRequest
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	d, err := ParseAdvance(req.By)
	if err != nil {
		return httpjson.BadRequest("%v", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.clock.Now().Add(d).Year() > maxYear {
		return httpjson.BadRequest("by %q takes the clock past the year %d", req.By, maxYear)
	}
	// The leases live now are carried forward with the clock
	// (store.DB.AdvanceClock): their holders lived through the move.
	now, err := a.db.AdvanceClock(r.Context(), d)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, Time{Now: now, AdvancedBy: d.String()})
	return nil
}

// ParseAdvance reads the duration of an advance: a Go duration above zero.
func ParseAdvance(by string) (time.Duration, error) {
	if by == "" {
		return 0, errString(`"by" is required: a duration such as "10m" or "24h"`)
	}
	d, err := time.ParseDuration(by)
	if err != nil {
		return 0, errString(`"by" must be a duration such as "10m" or "24h", not "` + by + `"`)
	}
	if d <= 0 {
		return 0, errString(`"by" must be above zero: the clock only goes forward`)
	}
	return d, nil
}

type errString string

func (e errString) Error() string { return string(e) }
