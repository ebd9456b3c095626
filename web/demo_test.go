package web_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard/store/storetest"
	"switchyard/web"
)

// fakeDemo records what the console asked of the simulator's switch.
type fakeDemo struct {
	mu      sync.Mutex
	started []float64
	stopped int
	running bool
}

func (d *fakeDemo) StartTraffic(_ context.Context, rate float64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running {
		return errors.New("already running")
	}
	d.started, d.running = append(d.started, rate), true
	return nil
}

func (d *fakeDemo) StopTraffic() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped++
	d.running = false
}

func (d *fakeDemo) TrafficStatus() web.DemoStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running {
		return web.DemoStatus{Running: true, Rate: d.started[len(d.started)-1], Elapsed: 3 * time.Second, Started: 7}
	}
	if d.stopped > 0 {
		return web.DemoStatus{Last: "9 arrivals in 3s at 3/s; every invariant held"}
	}
	return web.DemoStatus{}
}

func TestDemoTrafficButton(t *testing.T) {
	t.Parallel()
	d := &fakeDemo{}
	c := newConsole(t, web.Options{DB: storetest.New(t), Demo: d})

	doc := c.get(t, "/admin", http.StatusOK)
	if tid(doc, "demo-start").Length() != 1 || tid(doc, "demo-stop").Length() != 0 {
		t.Fatal("the overview does not offer to start demo traffic")
	}

	t.Run("a rate that is not a positive number up to 50 starts nothing", func(t *testing.T) {
		for _, rate := range []string{"0", "-1", "abc", "51"} {
			resp, _ := c.post(t, "/admin/demo/start", url.Values{"rate": {rate}})
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("rate %q: status %d", rate, resp.StatusCode)
			}
		}
		if len(d.started) != 0 {
			t.Fatalf("started with %v", d.started)
		}
	})

	t.Run("start, see it running, stop, see the verdict", func(t *testing.T) {
		resp, _ := c.post(t, "/admin/demo/start", url.Values{"rate": {"2.5"}})
		if resp.StatusCode != http.StatusSeeOther || len(d.started) != 1 || d.started[0] != 2.5 {
			t.Fatalf("status %d, started %v", resp.StatusCode, d.started)
		}
		doc := c.get(t, "/admin", http.StatusOK)
		if state := trimmed(tid(doc, "demo-state")); !strings.Contains(state, "Running at 2.5 arrivals/s") {
			t.Fatalf("state %q", state)
		}
		if tid(doc, "demo-stop").Length() != 1 {
			t.Fatal("no stop button while running")
		}
		c.post(t, "/admin/demo/stop", url.Values{})
		if d.stopped != 1 {
			t.Fatalf("stopped %d times", d.stopped)
		}
		doc = c.get(t, "/admin", http.StatusOK)
		if last := trimmed(tid(doc, "demo-last")); !strings.Contains(last, "every invariant held") {
			t.Fatalf("last run %q", last)
		}
	})

	t.Run("a cross-origin start is refused", func(t *testing.T) {
		resp, _ := c.post(t, "/admin/demo/start", url.Values{"rate": {"1"}}, "Sec-Fetch-Site", "cross-site")
		if resp.StatusCode != http.StatusForbidden || len(d.started) != 1 {
			t.Fatalf("status %d, started %v", resp.StatusCode, d.started)
		}
	})
}

func TestNoDemoPanelWithoutSimulator(t *testing.T) {
	t.Parallel()
	c := newConsole(t, web.Options{DB: storetest.New(t)})
	if tid(c.get(t, "/admin", http.StatusOK), "demo-panel").Length() != 0 {
		t.Fatal("a demo panel shows on a process without the simulator")
	}
	if resp, _ := c.post(t, "/admin/demo/start", url.Values{"rate": {"1"}}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d", resp.StatusCode)
	}
}
