package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"testing"

	"github.com/gorilla/mux"

	"switchyard/httpjson"
	"switchyard/httpjson/httpjsontest"
	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
)

// FuzzTopicPublish posts any body with any key to any topic through the
// operator API's POST /topics/{topic}/messages (the path identity events
// are published on): never a 5xx or a panic; a 4xx is a JSON error and
// commits nothing; a 202 is the body, as sent, at the answered position
// under the key asked for. It runs over its seeds in every `go test`, and
// for a fixed time in CI (.ci/fuzz).
func FuzzTopicPublish(f *testing.F) {
	const topic = "pin.identity.users.v1"
	event := `{"messageId":"6f1c1a52-0000-4000-8000-000000000001","type":"pin.identity.user-upserted","contractVersion":1,` +
		`"aggregateId":"11111111-1111-4111-8111-111111111111","aggregateType":"User","occurredAt":"2026-01-01T00:00:00Z",` +
		`"payload":{"UserId":"11111111-1111-4111-8111-111111111111","Type":"Agent","Status":"Active","PhoneNumber":"+79990001234","Version":1}}`
	for _, s := range []struct{ topic, key, body string }{
		{topic, "", event},
		{topic, "explicit-key", event},
		{topic, "", `{"aggregateId":""}`},
		{topic, "", `{"aggregateId":42}`},
		{topic, "", `{"aggregateId":null}`},
		{topic, "k", `{}`},
		{topic, "k", `[]`},
		{topic, "k", `"a string"`},
		{topic, "k", `{"a":1} {"b":2}`},
		{topic, "k", `{"a":`},
		{topic, "k", ``},
		{topic, "k", `  {"padded": true}  `},
		{"no.such.topic", "k", `{}`},
		{"", "k", `{}`},
		{"a/b", "k", `{}`},
		{topic, "ключ", `{"aggregateId":"агрегат"}`},
	} {
		f.Add(s.topic, s.key, []byte(s.body))
	}

	db := storetest.NewWith(f, store.Options{Synchronous: store.SyncNormal})
	if _, err := queue.NewTopic(context.Background(), queue.TopicOpts{DB: db, Name: topic}); err != nil {
		f.Fatal(err)
	}
	admin := queue.NewAdmin(queue.AdminOpts{DB: db})
	r := mux.NewRouter()
	r.NotFoundHandler = httpjson.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return httpjson.NotFound("no such route") })
	r.MethodNotAllowedHandler = httpjson.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		return httpjson.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed on this route")
	})
	admin.AdminRoutes(r.PathPrefix("/admin/api").Subrouter())
	// The database's version changes exactly when a commit changed it.
	watch := storetest.WatchCommits(f, db)
	version := func(t *testing.T) string { return watch.Version(t) }

	f.Fuzz(func(t *testing.T, name, key string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "http://switchyard.test/", bytes.NewReader(body))
		req.URL.Path = "/admin/api/topics/" + name + "/messages"
		if key != "" {
			req.URL.RawQuery = "key=" + url.QueryEscape(key)
		}
		before := version(t)
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		switch {
		case httpjsontest.CheckRefusal(t, "a topic publish", rec):
			if after := version(t); after != before {
				t.Fatalf("refused with %d %s but changed the database", rec.Code, rec.Body)
			}
			return
		case rec.Code == http.StatusMovedPermanently && path.Clean(req.URL.Path) != req.URL.Path:
			return // the router's redirect to the clean path, as for every route
		case rec.Code != http.StatusAccepted:
			t.Fatalf("answered %d %s, want 202 or a 4xx", rec.Code, rec.Body)
		}
		if name != topic {
			t.Fatalf("a publish to %q was accepted", name)
		}
		var pos queue.Position
		if err := json.Unmarshal(rec.Body.Bytes(), &pos); err != nil {
			t.Fatal(err)
		}
		recs, err := admin.Read(context.Background(), topic, queue.ReadFilter{Partition: &pos.Partition, FromOffset: pos.Offset, Limit: 1})
		if err != nil || len(recs) != 1 || recs[0].Offset != pos.Offset {
			t.Fatalf("202 at %+v, but the log has %+v (%v)", pos, recs, err)
		}
		if !bytes.Equal(recs[0].Value, bytes.TrimSpace(body)) {
			t.Fatalf("stored %q, sent %q", recs[0].Value, body)
		}
		wantKey := key
		if wantKey == "" {
			var fields struct {
				AggregateID string `json:"aggregateId"`
			}
			_ = json.Unmarshal(body, &fields)
			wantKey = fields.AggregateID
		}
		if recs[0].Key != wantKey {
			t.Fatalf("stored under key %q, want %q", recs[0].Key, wantKey)
		}
	})
}
