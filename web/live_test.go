package web_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/web"
)

// poll is one htmx refresh of a page's live region: HX-Request, and the
// ETag of the fragment the region shows (none on the first poll).
func (c *console) poll(t *testing.T, path, etag string) (status int, tag, body string, header http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("HX-Request", "true")
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("ETag"), string(b), resp.Header
}

func TestLiveRefreshAnswersNotModified(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	c := newConsole(t, web.Options{DB: db, Queues: queue.NewAdmin(queue.AdminOpts{DB: db})})

	status, first, body, _ := c.poll(t, "/admin/queues", "")
	if status != http.StatusOK || first == "" || !strings.Contains(body, `data-testid="queue-table"`) {
		t.Fatalf("first poll: status %d, ETag %q, body:\n%s", status, first, body)
	}

	t.Run("a poll of an idle page answers 304 with no body", func(t *testing.T) {
		status, tag, body, h := c.poll(t, "/admin/queues", first)
		if status != http.StatusNotModified || body != "" {
			t.Fatalf("status %d, body %q; want 304 and none", status, body)
		}
		if tag != first {
			t.Errorf("ETag %q, want %q", tag, first)
		}
		if cc := h.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control %q, want no-store", cc)
		}
	})

	t.Run("a poll names any of several tags", func(t *testing.T) {
		if status, _, _, _ := c.poll(t, "/admin/queues", `"other", W/`+first); status != http.StatusNotModified {
			t.Fatalf("status %d, want 304", status)
		}
	})

	t.Run("a full page load is rendered whatever the client sends", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, c.base+"/admin/queues", nil)
		req.Header.Set("If-None-Match", first)
		resp, err := c.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "<html") {
			t.Fatalf("status %d, body %d bytes", resp.StatusCode, len(b))
		}
	})

	t.Run("after a change the poll answers 200 with the new fragment", func(t *testing.T) {
		q := queue.New(queue.NewOpts{DB: db, Name: "live.changed"})
		if _, err := q.Send(ctx, queue.Message{Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		status, tag, body, _ := c.poll(t, "/admin/queues", first)
		if status != http.StatusOK || !strings.Contains(body, `data-testid="queue-live.changed"`) {
			t.Fatalf("status %d, body:\n%s", status, body)
		}
		if tag == "" || tag == first {
			t.Fatalf("ETag %q after the change, first was %q", tag, first)
		}
		if strings.Contains(body, "<html") {
			t.Fatal("the poll got the whole page, not the fragment")
		}
	})
}
