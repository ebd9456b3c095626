package queue_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"switchyard/httpjson/httpjsontest"
	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// batchBundle is a topic behind the admin API, served with a body cap as
// web/ serves it.
type batchBundle struct {
	db    *store.DB
	topic *queue.Topic
	url   string // …/admin/api/topics/{topic}/messages
}

const batchTopic = "pin.identity.users.v1"

// batchBodyLimit is the test server's body cap (web's default is 1 MiB).
const batchBodyLimit = 1 << 20

func setupBatch(t *testing.T) *batchBundle {
	t.Helper()
	db := storetest.New(t)
	topic := newTopic(t, db, batchTopic, 6)
	r := mux.NewRouter()
	queue.NewAdmin(queue.AdminOpts{DB: db}).AdminRoutes(r.PathPrefix("/admin/api").Subrouter())
	srv := httptest.NewServer(http.MaxBytesHandler(r, batchBodyLimit))
	t.Cleanup(srv.Close)
	return &batchBundle{db: db, topic: topic, url: srv.URL + "/admin/api/topics/" + batchTopic + "/messages"}
}

// post sends body with contentType to the publish route (query appended).
func (b *batchBundle) post(t *testing.T, query, contentType, body string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.url+query, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// positions are a 202 batch answer's records.
func (r reply) positions(t *testing.T) []queue.Position {
	t.Helper()
	var out struct {
		Records []queue.Position `json:"records"`
	}
	if err := json.Unmarshal([]byte(r.raw), &out); err != nil {
		t.Fatalf("batch answer %s: %v", r.raw, err)
	}
	return out.Records
}

// invalidIndexes are the indexes a 400 invalid_records answer lists.
func (r reply) invalidIndexes(t *testing.T) []int {
	t.Helper()
	var out struct {
		Invalid []struct {
			Index   int    `json:"index"`
			Line    int    `json:"line"`
			Message string `json:"message"`
		} `json:"invalid"`
	}
	if err := json.Unmarshal([]byte(r.raw), &out); err != nil {
		t.Fatalf("400 answer %s: %v", r.raw, err)
	}
	var idx []int
	for _, in := range out.Invalid {
		if in.Message == "" {
			t.Errorf("invalid record %d without a message: %s", in.Index, r.raw)
		}
		idx = append(idx, in.Index)
	}
	return idx
}

// event is record n of a test batch, keyed by one of keys users.
func event(n, users int) string {
	return fmt.Sprintf(`{"messageId":"m-%d","aggregateId":"user-%d","payload":{"n":%d}}`, n, n%users, n)
}

func events(first, count, users int) []string {
	out := make([]string, count)
	for i := range out {
		out[i] = event(first+i, users)
	}
	return out
}

func asArray(recs []string) string  { return "[" + strings.Join(recs, ",") + "]" }
func asNDJSON(recs []string) string { return strings.Join(recs, "\n") + "\n" }

// ends are the topic's partitions' end offsets.
func (b *batchBundle) ends(t *testing.T) []int64 {
	t.Helper()
	ends := make([]int64, b.topic.Partitions())
	for p := range ends {
		if err := b.db.Read.QueryRowContext(t.Context(),
			`select next_offset from queue_topic_partitions where topic = ? and partition_id = ?`, batchTopic, p).Scan(&ends[p]); err != nil {
			t.Fatal(err)
		}
	}
	return ends
}

func (b *batchBundle) logCount(t *testing.T) int {
	t.Helper()
	return count(t, b.db, `select count(*) from queue_topic_log`)
}

// consumed subscribes a group from the earliest record and returns the
// records it handled once it has n of them.
func (b *batchBundle) consumed(t *testing.T, group string, n int) []queue.Record {
	t.Helper()
	var (
		mu   sync.Mutex
		recs []queue.Record
	)
	subscribe(t, b.topic, queue.SubscribeOpts{Group: group, Handler: func(_ context.Context, _ *sql.Tx, r queue.Record) error {
		mu.Lock()
		defer mu.Unlock()
		recs = append(recs, r)
		return nil
	}})
	got := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(recs)
	}
	testwait.Until(t, 30*time.Second, fmt.Sprintf("%d records consumed", n), func() bool { return got() >= n },
		func() string { return fmt.Sprintf("%d consumed", got()) })
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(recs)
}

func TestPublishBatch(t *testing.T) {
	t.Parallel()

	formats := []struct {
		name, contentType string
		encode            func([]string) string
	}{
		{"a JSON array", "application/json", asArray},
		{"JSON lines", "application/x-ndjson", asNDJSON},
	}
	for _, f := range formats {
		t.Run(f.name+" is published in body order and a consumer reads each record where its answer says", func(t *testing.T) {
			t.Parallel()
			b := setupBatch(t)
			const n, users = 300, 7 // several records per key in every partition
			recs := events(0, n, users)
			r := b.post(t, "", f.contentType, f.encode(recs))
			if r.status != http.StatusAccepted {
				t.Fatalf("batch: %d %s, want 202", r.status, r.raw)
			}
			pos := r.positions(t)
			if len(pos) != n {
				t.Fatalf("%d positions for %d records", len(pos), n)
			}
			at := map[queue.Position]int{}
			last := map[int]int64{}
			for i, p := range pos {
				if want := queue.PartitionFor(fmt.Sprintf("user-%d", i%users), 6); p.Partition != want {
					t.Errorf("record %d at partition %d, its key's is %d", i, p.Partition, want)
				}
				if prev, ok := last[p.Partition]; ok && p.Offset != prev+1 {
					t.Errorf("record %d at offset %d of partition %d, the previous record of that partition at %d: not in body order", i, p.Offset, p.Partition, prev)
				}
				last[p.Partition] = p.Offset
				at[p] = i
			}
			got := b.consumed(t, "checker", n)
			for _, rec := range got {
				i, ok := at[queue.Position{Partition: rec.Partition, Offset: rec.Offset}]
				if !ok {
					t.Fatalf("consumed a record at %d/%d that no answer named", rec.Partition, rec.Offset)
				}
				if string(rec.Value) != recs[i] || rec.Key != fmt.Sprintf("user-%d", i%users) {
					t.Errorf("at %d/%d the consumer read %s key %q, the answer put record %d there: %s", rec.Partition, rec.Offset, rec.Value, rec.Key, i, recs[i])
				}
			}
			perKey := map[string][]int{}
			for _, rec := range got {
				perKey[rec.Key] = append(perKey[rec.Key], at[queue.Position{Partition: rec.Partition, Offset: rec.Offset}])
			}
			for key, order := range perKey {
				if !slices.IsSorted(order) {
					t.Errorf("key %s consumed in the order %v, want the body's", key, order)
				}
			}
		})
	}

	t.Run("JSON lines skip blank lines and take CRLF and a charset", func(t *testing.T) {
		t.Parallel()
		b := setupBatch(t)
		body := "\r\n" + event(0, 3) + "\r\n\r\n   \n" + event(1, 3) + "\r\n" + event(2, 3)
		r := b.post(t, "", "application/x-ndjson; charset=utf-8", body)
		if r.status != http.StatusAccepted || len(r.positions(t)) != 3 {
			t.Fatalf("batch: %d %s, want 202 with 3 records", r.status, r.raw)
		}
		for _, rec := range readAll(t, b.topic) {
			if !strings.HasPrefix(string(rec.Value), "{") || !strings.HasSuffix(string(rec.Value), "}") {
				t.Errorf("stored %q, want the line without its spaces and line end", rec.Value)
			}
		}
	})

	t.Run("a key parameter keys every record of the batch", func(t *testing.T) {
		t.Parallel()
		b := setupBatch(t)
		r := b.post(t, "?key=one", "application/json", asArray([]string{event(0, 5), event(1, 5), `{"no":"aggregateId"}`}))
		if r.status != http.StatusAccepted {
			t.Fatalf("batch: %d %s", r.status, r.raw)
		}
		want := queue.PartitionFor("one", 6)
		for i, p := range r.positions(t) {
			if p.Partition != want || p.Offset != int64(i) {
				t.Errorf("record %d at %+v, want offset %d of partition %d", i, p, i, want)
			}
		}
	})

	for _, f := range formats {
		t.Run(f.name+" with invalid records is refused whole, listing each by its index", func(t *testing.T) {
			t.Parallel()
			b := setupBatch(t)
			watch := storetest.WatchCommits(t, b.db)
			recs := events(0, 8, 3)
			recs[2] = `{"aggregateId":""}`
			recs[5] = `{"aggregateId":42}`
			recs[6] = `"not an object"`
			if f.contentType == "application/x-ndjson" {
				recs[7] = `{"aggregateId":"x"` // a line cut short
			} else {
				recs[7] = `[{"aggregateId":"x"}]`
			}
			before := watch.Version(t)
			r := b.post(t, "", f.contentType, f.encode(recs))
			if r.status != http.StatusBadRequest || r.errorCode() != "invalid_records" {
				t.Fatalf("batch with bad records: %d %s, want 400 invalid_records", r.status, r.raw)
			}
			if got := r.invalidIndexes(t); !slices.Equal(got, []int{2, 5, 6, 7}) {
				t.Errorf("invalid records %v, want [2 5 6 7]: %s", got, r.raw)
			}
			if watch.Version(t) != before || b.logCount(t) != 0 {
				t.Errorf("a refused batch changed the database: %d records in the log", b.logCount(t))
			}
		})
	}

	t.Run("JSON lines name each bad record's line", func(t *testing.T) {
		t.Parallel()
		b := setupBatch(t)
		r := b.post(t, "", "application/x-ndjson", event(0, 3)+"\n\n"+`{"x":1}`+"\n")
		if r.status != http.StatusBadRequest || !strings.Contains(r.raw, `"index":1,"line":3`) {
			t.Errorf("a keyless third line: %d %s, want it named as record 1 on line 3", r.status, r.raw)
		}
	})

	t.Run("a batch whose write fails in the database publishes none of it and takes no offset", func(t *testing.T) {
		t.Parallel()
		b := setupBatch(t)
		if r := b.post(t, "", "application/json", asArray(events(0, 12, 6))); r.status != http.StatusAccepted {
			t.Fatalf("first batch: %d %s", r.status, r.raw)
		}
		// A key of the last partition: the batch's records are written
		// partition by partition, so every partition's offsets are taken,
		// and the other partitions' records inserted, before the database
		// refuses this one.
		poison := "poison"
		for n := 0; queue.PartitionFor(poison, 6) != 5; n++ {
			poison = fmt.Sprintf("poison-%d", n)
		}
		poisonKey(t, b.db, poison)
		before, records := b.ends(t), b.logCount(t)
		recs := append(events(100, 200, 50), fmt.Sprintf(`{"aggregateId":%q}`, poison))
		r := b.post(t, "", "application/x-ndjson", asNDJSON(recs))
		if r.status < 500 {
			t.Fatalf("batch with a record the database refuses: %d %s, want a 5xx", r.status, r.raw)
		}
		if after := b.ends(t); !slices.Equal(after, before) || b.logCount(t) != records {
			t.Fatalf("a failed batch left partitions at %v (were %v) and %d records (were %d)", after, before, b.logCount(t), records)
		}
		r = b.post(t, "", "application/json", asArray(events(300, 12, 6)))
		if r.status != http.StatusAccepted {
			t.Fatalf("batch after the failure: %d %s", r.status, r.raw)
		}
		for _, p := range r.positions(t) {
			if p.Offset != before[p.Partition] {
				t.Errorf("the next batch wrote partition %d at offset %d, want %d: the failed batch took offsets", p.Partition, p.Offset, before[p.Partition])
			}
			before[p.Partition]++
		}
	})

	t.Run("the largest batch is taken and one record more is refused whole", func(t *testing.T) {
		t.Parallel()
		b := setupBatch(t)
		// Small records, so that the count and not the body cap decides.
		small := make([]string, queue.MaxPublishBatch+1)
		for i := range small {
			small[i] = fmt.Sprintf(`{"aggregateId":"k%d"}`, i%10)
		}
		for _, f := range formats {
			r := b.post(t, "", f.contentType, f.encode(small))
			if r.status != http.StatusRequestEntityTooLarge || r.errorCode() != "too_many_records" {
				t.Fatalf("%s of %d records: %d %.300s, want 413 too_many_records", f.name, len(small), r.status, r.raw)
			}
			if !strings.Contains(r.raw, fmt.Sprint(queue.MaxPublishBatch)) {
				t.Errorf("the refusal does not say the limit: %s", r.raw)
			}
		}
		if n := b.logCount(t); n != 0 {
			t.Fatalf("refused batches wrote %d records", n)
		}
		r := b.post(t, "", "application/json", asArray(small[:queue.MaxPublishBatch]))
		if r.status != http.StatusAccepted || len(r.positions(t)) != queue.MaxPublishBatch {
			t.Fatalf("a batch of %d: %d %.300s", queue.MaxPublishBatch, r.status, r.raw)
		}
	})

	t.Run("a body over the server's cap is a 413 and publishes nothing", func(t *testing.T) {
		t.Parallel()
		b := setupBatch(t)
		big := fmt.Sprintf(`{"aggregateId":"k","pad":%q}`, strings.Repeat("x", batchBodyLimit/4))
		for _, f := range formats {
			r := b.post(t, "", f.contentType, f.encode([]string{big, big, big, big}))
			if r.status != http.StatusRequestEntityTooLarge || r.errorCode() != "body_too_large" {
				t.Errorf("%s over the cap: %d %s, want 413 body_too_large", f.name, r.status, r.raw)
			}
		}
		if n := b.logCount(t); n != 0 {
			t.Fatalf("refused bodies wrote %d records", n)
		}
	})

	t.Run("empty, malformed and undeclared bodies are refused", func(t *testing.T) {
		t.Parallel()
		b := setupBatch(t)
		for _, c := range []struct {
			name, contentType, body string
			status                  int
		}{
			{"an empty array", "application/json", `[]`, http.StatusBadRequest},
			{"an empty JSON-lines body", "application/x-ndjson", "", http.StatusBadRequest},
			{"only blank lines", "application/x-ndjson", "\n \n", http.StatusBadRequest},
			{"an unclosed array", "application/json", `[{"aggregateId":"x"}`, http.StatusBadRequest},
			{"a broken array", "application/json", `[{"aggregateId":"x"} {"aggregateId":"y"}]`, http.StatusBadRequest},
			{"an array and more", "application/json", `[{"aggregateId":"x"}] {}`, http.StatusBadRequest},
			{"two arrays", "application/json", `[{"aggregateId":"x"}][]`, http.StatusBadRequest},
			{"an array sent as text", "text/plain", `[{"aggregateId":"x"}]`, http.StatusUnsupportedMediaType},
			{"JSON lines sent as a form", "application/x-www-form-urlencoded", event(0, 1), http.StatusUnsupportedMediaType},
		} {
			if r := b.post(t, "", c.contentType, c.body); r.status != c.status || r.errorCode() == "" {
				t.Errorf("%s: %d %s, want %d with a JSON error", c.name, r.status, r.raw, c.status)
			}
		}
		if n := b.logCount(t); n != 0 {
			t.Fatalf("refused bodies wrote %d records", n)
		}
	})

	t.Run("one record as an object is answered as before", func(t *testing.T) {
		t.Parallel()
		b := setupBatch(t)
		r := b.post(t, "", "application/json", event(0, 1))
		if r.status != http.StatusAccepted || r.body["partition"] != float64(queue.PartitionFor("user-0", 6)) || r.body["offset"] != float64(0) || r.body["records"] != nil {
			t.Fatalf("a single record: %d %s, want 202 {partition, offset}", r.status, r.raw)
		}
		r = b.post(t, "", "application/json", asArray([]string{event(1, 1)}))
		if pos := r.positions(t); r.status != http.StatusAccepted || len(pos) != 1 || pos[0].Offset != 1 {
			t.Fatalf("a batch of one: %d %s, want 202 {records: [offset 1]}", r.status, r.raw)
		}
	})
}

// poisonKey makes the database refuse any topic record with the key, as a
// failing write deep inside a batch's transaction would: a trigger on
// SQLite, a trigger function on PostgreSQL.
func poisonKey(t *testing.T, db *store.DB, key string) {
	t.Helper()
	stmts := []string{fmt.Sprintf(`create trigger poison_key before insert on queue_topic_log
		when new.key = '%s' begin select raise(abort, 'poisoned key'); end`, key)}
	if db.Postgres() {
		stmts = []string{
			fmt.Sprintf(`create function poison_key() returns trigger language plpgsql as $$
				begin if new.key = '%s' then raise exception 'poisoned key'; end if; return new; end $$`, key),
			`create trigger poison_key before insert on queue_topic_log for each row execute function poison_key()`,
		}
	}
	for _, s := range stmts {
		if _, err := db.Write.ExecContext(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// FuzzPublishBatchMatchesSingle posts any body with any key as one record
// (application/json), as a one-record JSON array and as a one-line JSON-lines
// batch: the three agree — all refused with a 4xx JSON error, or all
// accepted and stored with the same key and value — so that a batch checks
// and keys its records exactly as the single-record publish does. It runs
// over its seeds in every `go test`.
func FuzzPublishBatchMatchesSingle(f *testing.F) {
	for _, s := range []struct{ key, body string }{
		{"", `{"aggregateId":"a","n":1}`},
		{"k", `{"n":1}`},
		{"", `{"aggregateId":"a","aggregateId":"b"}`},
		{"", `{"aggregateId":"a","aggregateId":7}`},
		{"", `{"aggregate\u0049d":"escaped"}`},
		{"", `{"AggregateId":"case"}`},
		{"", `{"payload":{"aggregateId":"nested"}}`},
		{"", "{\"aggregateId\":\"bad \xff utf-8\"}"},
		{"", `{"aggregateId":"x"} trailing`},
		{"", `{"aggregateId":"x"`},
		{"", `  {"aggregateId":"padded"}	`},
		{"", "\u00a0{\"aggregateId\":\"nbsp\"}"},
		{"", `{"aggregateId":""}`},
		{"", `{"aggregateId":null}`},
		{"k", `[]`},
		{"k", `1`},
		{"k", `"a string"`},
		{"", `{"aggregateId":"ключ","Name":{"FirstName":"Анна"}}`},
	} {
		f.Add(s.key, []byte(s.body))
	}
	db := storetest.NewWith(f, store.Options{Synchronous: store.SyncNormal})
	if _, err := queue.NewTopic(context.Background(), queue.TopicOpts{DB: db, Name: batchTopic}); err != nil {
		f.Fatal(err)
	}
	admin := queue.NewAdmin(queue.AdminOpts{DB: db})
	r := mux.NewRouter()
	admin.AdminRoutes(r.PathPrefix("/admin/api").Subrouter())

	type outcome struct {
		status     int
		key, value string
	}
	publish := func(t *testing.T, key, contentType string, body []byte) outcome {
		req := httptest.NewRequest(http.MethodPost, "http://switchyard.test/admin/api/topics/"+batchTopic+"/messages", bytes.NewReader(body))
		if key != "" {
			req.URL.RawQuery = "key=" + url.QueryEscape(key)
		}
		req.Header.Set("Content-Type", contentType)
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		if rec.Code != http.StatusAccepted {
			if httpjsontest.CheckRefusal(t, "a publish", rec) {
				return outcome{status: 400}
			}
			t.Fatalf("%s: answered %d %s, want 202 or a 4xx", contentType, rec.Code, rec.Body)
		}
		var out struct {
			queue.Position
			Records []queue.Position `json:"records"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		pos := out.Position
		if len(out.Records) == 1 {
			pos = out.Records[0]
		}
		recs, err := admin.Read(context.Background(), batchTopic, queue.ReadFilter{Partition: &pos.Partition, FromOffset: pos.Offset, Limit: 1})
		if err != nil || len(recs) != 1 || recs[0].Offset != pos.Offset {
			t.Fatalf("202 at %+v, but the log has %+v (%v)", pos, recs, err)
		}
		return outcome{status: 202, key: recs[0].Key, value: string(recs[0].Value)}
	}
	f.Fuzz(func(t *testing.T, key string, body []byte) {
		if bytes.ContainsAny(body, "\n") {
			return // more than one line of JSON lines
		}
		single := publish(t, key, "application/json", body)
		array := publish(t, key, "application/json", append(append([]byte("["), body...), ']'))
		lines := publish(t, key, queue.NDJSONType, body)
		if array != single || lines != single {
			t.Fatalf("body %q key %q: one record %+v, as an array %+v, as JSON lines %+v", body, key, single, array, lines)
		}
	})
}
