package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// metricValue reads a counter, gauge or histogram count from the default
// registry; 0 when the series does not exist yet.
func metricValue(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	v, _ := metricSeries(t, name, labels)
	return v
}

// metricSeries is metricValue that also tells whether a series matched.
func metricSeries(t testing.TB, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// TestMetricsExistFromDeclaration: an alert on a queue's or a group's
// counters sees 0 from the start, not "no data" until the first event.
func TestMetricsExistFromDeclaration(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	consumer := []string{
		"switchyard_queue_messages_received_total",
		"switchyard_queue_messages_succeeded_total",
		"switchyard_queue_messages_retried_total",
		"switchyard_queue_messages_dead_lettered_total",
		"switchyard_queue_handler_duration_seconds",
	}
	// want checks that each metric has a series at 0 for labels, or none.
	want := func(t *testing.T, present bool, labels map[string]string, metrics ...string) {
		t.Helper()
		for _, m := range metrics {
			v, ok := metricSeries(t, m, labels)
			if ok != present || v != 0 {
				t.Errorf("%s %v: exists %v with %v, want exists %v with 0", m, labels, ok, v, present)
			}
		}
	}

	t.Run("a queue's send counters exist once it is declared, its consumer counters once a worker starts", func(t *testing.T) {
		name := "declared.queue." + suffix
		labels := map[string]string{"queue": name}
		want(t, false, labels, "switchyard_queue_messages_sent_total")
		q := queue.New(queue.NewOpts{DB: db, Name: name})
		want(t, true, labels, "switchyard_queue_messages_sent_total", "switchyard_queue_duplicates_suppressed_total")
		want(t, false, labels, consumer...)
		start(t, q, queue.WorkerOpts{Handler: func(context.Context, queue.Message) error { return nil }})
		want(t, true, map[string]string{"queue": name, "group": ""}, consumer...)
	})

	t.Run("a topic's publish counter exists once it is declared, its group's counters once it subscribes", func(t *testing.T) {
		name := "declared.topic." + suffix
		group := "declared-group"
		want(t, false, map[string]string{"queue": name}, "switchyard_queue_messages_sent_total")
		topic := newTopic(t, db, name, 2)
		want(t, true, map[string]string{"queue": name}, "switchyard_queue_messages_sent_total")
		want(t, false, map[string]string{"queue": name, "group": group}, consumer...)
		subscribe(t, topic, queue.SubscribeOpts{Group: group, Handler: func(context.Context, *sql.Tx, queue.Record) error { return nil }})
		want(t, true, map[string]string{"queue": name, "group": group}, consumer...)
	})
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	// The registry is global: a fresh name per run keeps -count=N honest.
	name := fmt.Sprintf("metrics.test.%d", time.Now().UnixNano())
	q := queue.New(queue.NewOpts{DB: db, Name: name, Retry: queue.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	start(t, q, queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
		switch string(m.Body) {
		case "flaky":
			if m.Attempt == 1 {
				return errors.New("once")
			}
		case "bad":
			return queue.Permanent(errors.New("bad"))
		}
		return nil
	}})
	for _, m := range []queue.Message{{Body: []byte("ok"), Key: "a"}, {Body: []byte("ok"), Key: "a"}, {Body: []byte("flaky")}, {Body: []byte("bad")}} {
		if _, err := q.Send(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, 5*time.Second, "all handled", func() bool { return liveMessages(t, db, name) == 0 })
	testwait.Until(t, 5*time.Second, "the counters", func() bool {
		return metricValue(t, "switchyard_queue_messages_succeeded_total", map[string]string{"queue": name}) == 2
	})
	for metric, want := range map[string]float64{
		"switchyard_queue_messages_sent_total":          3,
		"switchyard_queue_duplicates_suppressed_total":  1,
		"switchyard_queue_messages_received_total":      4,
		"switchyard_queue_messages_retried_total":       1,
		"switchyard_queue_messages_dead_lettered_total": 1,
		"switchyard_queue_handler_duration_seconds":     4,
	} {
		if got := metricValue(t, metric, map[string]string{"queue": name}); got != want {
			t.Errorf("%s = %v, want %v", metric, got, want)
		}
	}
}
