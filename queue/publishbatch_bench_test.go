package queue_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gorilla/mux"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
)

// identityEvent is record n as identity publishes it (about 600 bytes),
// keyed by one of 1,000 users.
func identityEvent(n int) []byte {
	user := fmt.Sprintf("00000000-0000-4000-8000-%012d", n%1000)
	return fmt.Appendf(nil, `{"messageId":"6f1c1a52-0000-4000-8000-%012d","type":"pin.identity.user-upserted","contractVersion":1,`+
		`"aggregateId":%q,"aggregateType":"User","occurredAt":"2026-01-01T00:00:00.000000Z","correlationId":"bench-%d",`+
		`"payload":{"UserId":%q,"Type":"Investor","CompanyId":null,"Status":"Active",`+
		`"Name":{"FirstName":"Иван","LastName":"Петров","MiddleName":""},"PhoneNumber":"+79990001234",`+
		`"RegisteredVia":"Sms","ReferrerUrl":"lt-1-1","Version":%d}}`, n, user, n, user, 1+n/1000)
}

// BenchmarkPublishHTTP measures identity events published through the
// admin API's POST /topics/{topic}/messages over loopback HTTP against the
// same records through Topic.PublishBatch in-process, in one run, each on a
// fresh database (synchronous=FULL, 6 partitions, 1,000 keys):
//
//	in-process/batch=500: Topic.PublishBatch, 4 publishers (the baseline);
//	http/one:             one record a request, 16 connections (the route
//	                      before batches, what `switchyard loadtest` sent);
//	http/array/batch=500, http/ndjson/batch=500: 500 records a request as a
//	                      JSON array and as JSON lines, 4 connections.
//
// Each reports records/s; the HTTP batches also x-in-process, their rate
// over the in-process baseline's.
//
//	go test -run '^$' -bench BenchmarkPublishHTTP -benchtime 20000x -count 3 ./queue/
func BenchmarkPublishHTTP(b *testing.B) {
	const topic = "pin.identity.users.v1"
	type sendFunc func(ctx context.Context, env *benchEnv, first, count int) error
	cases := []struct {
		name              string
		batch, publishers int
		send              sendFunc
	}{
		{"in-process/batch=500", 500, 4, func(ctx context.Context, env *benchEnv, first, count int) error {
			recs := make([]queue.KeyValue, count)
			for i := range recs {
				recs[i] = queue.KeyValue{Key: fmt.Sprintf("00000000-0000-4000-8000-%012d", (first+i)%1000), Value: identityEvent(first + i)}
			}
			_, err := env.topic.PublishBatch(ctx, recs)
			return err
		}},
		{"http/one", 1, 16, func(ctx context.Context, env *benchEnv, first, _ int) error {
			return env.post(ctx, "application/json", identityEvent(first))
		}},
		{"http/array/batch=500", 500, 4, func(ctx context.Context, env *benchEnv, first, count int) error {
			body := []byte{'['}
			for i := range count {
				if i > 0 {
					body = append(body, ',')
				}
				body = append(body, identityEvent(first+i)...)
			}
			return env.post(ctx, "application/json", append(body, ']'))
		}},
		{"http/ndjson/batch=500", 500, 4, func(ctx context.Context, env *benchEnv, first, count int) error {
			var body []byte
			for i := range count {
				body = append(append(body, identityEvent(first+i)...), '\n')
			}
			return env.post(ctx, queue.NDJSONType, body)
		}},
	}
	var baseline float64
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
			t, err := queue.NewTopic(ctx, queue.TopicOpts{DB: db, Name: topic, Partitions: 6})
			if err != nil {
				b.Fatal(err)
			}
			r := mux.NewRouter()
			queue.NewAdmin(queue.AdminOpts{DB: db}).AdminRoutes(r.PathPrefix("/admin/api").Subrouter())
			srv := httptest.NewServer(http.MaxBytesHandler(r, 1<<20))
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: c.publishers}
			defer tr.CloseIdleConnections()
			env := &benchEnv{topic: t, client: &http.Client{Transport: tr}, url: srv.URL + "/admin/api/topics/" + topic + "/messages"}
			b.ResetTimer()
			sendWith(b, c.publishers, b.N, c.batch, func(ctx context.Context, first, count int) error {
				return c.send(ctx, env, first, count)
			})
			b.StopTimer()
			var n int
			if err := db.Read.QueryRow(`select count(*) from queue_topic_log`).Scan(&n); err != nil || n != b.N {
				b.Fatalf("%d records in the log (%v), want %d", n, err, b.N)
			}
			rate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "records/s")
			switch {
			case c.name == "in-process/batch=500":
				baseline = rate
			case c.batch > 1 && baseline > 0:
				b.ReportMetric(rate/baseline, "x-in-process")
			}
		})
	}
}

type benchEnv struct {
	topic  *queue.Topic
	client *http.Client
	url    string
}

func (e *benchEnv) post(ctx context.Context, contentType string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("publish: %d %s", resp.StatusCode, raw)
	}
	return nil
}

// sendWith is sendAll with the given number of publishers.
func sendWith(b *testing.B, publishers, n, batch int, send func(ctx context.Context, first, count int) error) {
	b.Helper()
	next := make(chan int)
	go func() {
		defer close(next)
		for first := 0; first < n; first += batch {
			next <- first
		}
	}()
	done := make(chan struct{})
	for range publishers {
		go func() {
			defer func() { done <- struct{}{} }()
			for first := range next {
				if err := send(context.Background(), first, min(batch, n-first)); err != nil {
					b.Error(err)
					for range next { // drain, so the feeder ends
					}
					return
				}
			}
		}()
	}
	for range publishers {
		<-done
	}
}
