package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"switchyard/queue"
)

// identityLine is line n of a publish file: an identity event of one of
// users users.
func identityLine(n, users int) string {
	user := fmt.Sprintf("00000000-0000-4000-8000-%012d", n%users)
	return fmt.Sprintf(`{"messageId":"6f1c1a52-0000-4000-8000-%012d","type":"pin.identity.user-upserted","contractVersion":1,`+
		`"aggregateId":%q,"aggregateType":"User","occurredAt":"2026-01-01T00:00:00Z","correlationId":"c%d",`+
		`"payload":{"UserId":%q,"Type":"Investor","Status":"Active","Name":{"FirstName":"A"},"PhoneNumber":"+79990001234","RegisteredVia":"Sms","Version":%d}}`,
		n, user, n, user, 1+n/users)
}

// topicLog is the identity topic's log as (key, value) in offset order per
// key.
func topicLog(t *testing.T, w *wiredApp) (count int, perKey map[string][]string) {
	t.Helper()
	rows, err := w.db.Read.QueryContext(t.Context(),
		`select key, value from queue_topic_log where topic = ? order by partition_id, log_offset`, "pin.identity.users.v1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	perKey = map[string][]string{}
	for rows.Next() {
		var key string
		var value []byte
		if err := rows.Scan(&key, &value); err != nil {
			t.Fatal(err)
		}
		perKey[key] = append(perKey[key], string(value))
		count++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return count, perKey
}

func TestPublishThroughTheAdminAPI(t *testing.T) {
	t.Parallel()
	w := newWiredApp(t, walkSecrets, nil)
	publisher := func(batch int, progress io.Writer) *httpPublisher {
		return &httpPublisher{base: w.srv.URL, token: w.sec.AdminToken, topic: "pin.identity.users.v1", batch: batch,
			client: &http.Client{Timeout: 30 * time.Second}, progress: progress, progressEvery: time.Nanosecond}
	}

	t.Run("every line is published in batches, each key's lines in file order", func(t *testing.T) {
		const n, users = 1234, 37
		var file strings.Builder
		want := map[string][]string{}
		for i := range n {
			line := identityLine(i, users)
			file.WriteString(line + "\n")
			if i%100 == 0 {
				file.WriteString("\n")
			}
			key := fmt.Sprintf("00000000-0000-4000-8000-%012d", i%users)
			want[key] = append(want[key], line)
		}
		var progress bytes.Buffer
		sum, err := publisher(100, &progress).publish(t.Context(), strings.NewReader(file.String()))
		if err != nil || sum.Published != n || sum.Blank != 13 {
			t.Fatalf("publish: %+v %v, want %d published and 13 blank lines", sum, err, n)
		}
		count, got := topicLog(t, w)
		if count != n {
			t.Fatalf("%d records in the topic, want %d", count, n)
		}
		for key, lines := range want {
			if !slices.Equal(got[key], lines) {
				t.Fatalf("key %s: the topic holds its %d records out of the file's order", key, len(lines))
			}
		}
		if lines := strings.Count(progress.String(), "published ("); lines < 2 || !strings.Contains(progress.String(), fmt.Sprintf(": %d published", n)) {
			t.Errorf("progress: %q, want a line per batch at this interval, the last with every record", progress.String())
		}
	})

	t.Run("a refused line stops the run after every line before it, none after", func(t *testing.T) {
		before, _ := topicLog(t, w)
		var file strings.Builder
		for i := range 250 {
			line := identityLine(10_000+i, 5)
			if i == 149 {
				line = `{"no":"aggregateId"}` // line 150, the middle of the second batch
			}
			file.WriteString(line + "\n")
		}
		sum, err := publisher(100, nil).publish(t.Context(), strings.NewReader(file.String()))
		if err == nil || !strings.Contains(err.Error(), "line 150:") || !strings.Contains(err.Error(), "aggregateId") {
			t.Fatalf("publish with a keyless line 150: %v, want an error naming it", err)
		}
		after, _ := topicLog(t, w)
		if sum.Published != 149 || after-before != 149 {
			t.Fatalf("%d reported and %d written before the bad line, want 149", sum.Published, after-before)
		}
	})

	t.Run("a wrong token publishes nothing and says what the instance answered", func(t *testing.T) {
		before, _ := topicLog(t, w)
		p := publisher(100, nil)
		p.token = strings.Repeat("x", 32)
		sum, err := p.publish(t.Context(), strings.NewReader(identityLine(1, 1)+"\n"))
		if err == nil || !strings.Contains(err.Error(), "401") || sum.Published != 0 {
			t.Fatalf("publish with a wrong token: %+v %v, want a 401 error", sum, err)
		}
		if after, _ := topicLog(t, w); after != before {
			t.Fatalf("%d records written with a wrong token", after-before)
		}
	})

	t.Run("a batch body is refused without credentials and from another origin, as a single record is", func(t *testing.T) {
		url := w.srv.URL + "/admin/api/topics/pin.identity.users.v1/messages"
		body := identityLine(1, 1) + "\n" + identityLine(2, 1) + "\n"
		for _, c := range []struct {
			name   string
			header http.Header
			status int
			code   string
		}{
			{"without a token", http.Header{}, http.StatusUnauthorized, "unauthorized"},
			{"with a wrong token", http.Header{"Authorization": {"Bearer " + strings.Repeat("x", 32)}}, http.StatusUnauthorized, "unauthorized"},
			{"from a cross-site page", http.Header{"Authorization": {"Bearer " + w.sec.AdminToken}, "Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden, "cross_origin"},
			{"from another origin", http.Header{"Authorization": {"Bearer " + w.sec.AdminToken}, "Origin": {"https://evil.example"}}, http.StatusForbidden, "cross_origin"},
			{"with the token", http.Header{"Authorization": {"Bearer " + w.sec.AdminToken}}, http.StatusAccepted, ""},
		} {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header = c.header
			req.Header.Set("Content-Type", queue.NDJSONType)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || c.code != "" && errorCode(raw) != c.code {
				t.Errorf("%s: %d %s, want %d %s", c.name, resp.StatusCode, raw, c.status, c.code)
			}
		}
	})
}

func TestPublishOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--url", "http://127.0.0.1:1", "--batch", "1000", "f"}, true},
		{[]string{"--url", "http://127.0.0.1:1", "--batch", "1", "f"}, true},
		{[]string{"--url", "http://127.0.0.1:1", "--batch", "1001", "f"}, false},
		{[]string{"--url", "http://127.0.0.1:1", "--batch", "0", "f"}, false},
	} {
		var a publishArgs
		_, err := parseFlags("publish", a.options(), c.args, func(string) string { return "" }, io.Discard)
		if (err == nil) != c.ok {
			t.Errorf("publish %v: %v, want ok=%v", c.args, err, c.ok)
		}
	}
	var a publishArgs
	if _, err := parseFlags("publish", a.options(), []string{"f"}, func(string) string { return "" }, io.Discard); err != nil || a.batch != defaultPublishBatch || a.url != "" {
		t.Errorf("defaults: batch %d url %q (%v), want %d and no URL", a.batch, a.url, err, defaultPublishBatch)
	}
}
