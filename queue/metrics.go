package queue

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics on the default registry. The label queue holds a queue's name or a
// topic's name; group is the consumer group, empty for queues. A queue's or
// topic's send series exist, at 0, from its declaration (New, NewTopic), its
// consumer series from Start or Subscribe; the lag gauges from the first
// time the group's owner reads them.
var (
	metricSent = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_queue_messages_sent_total",
		Help: "Messages sent to a queue or published to a topic.",
	}, []string{"queue"})
	metricDuplicates = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_queue_duplicates_suppressed_total",
		Help: "Sends dropped because their idempotency key was already used on the queue.",
	}, []string{"queue"})
	metricReceived = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_queue_messages_received_total",
		Help: "Deliveries of a message to a handler (every attempt counts).",
	}, []string{"queue", "group"})
	metricSucceeded = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_queue_messages_succeeded_total",
		Help: "Messages whose handler succeeded and which were acknowledged.",
	}, []string{"queue", "group"})
	metricRetried = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_queue_messages_retried_total",
		Help: "Handler failures that were scheduled for another attempt.",
	}, []string{"queue", "group"})
	metricDead = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_queue_messages_dead_lettered_total",
		Help: "Messages moved to the dead-letter queue.",
	}, []string{"queue", "group"})
	metricDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "switchyard_queue_handler_duration_seconds",
		Help:    "Time a handler took, per attempt.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"queue", "group"})
	metricLag = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_queue_topic_lag_messages",
		Help: "Log-end offset minus the group's committed offset, per partition.",
	}, []string{"topic", "group", "partition"})
	metricOldest = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_queue_topic_oldest_unprocessed_age_seconds",
		Help: "Age of the group's oldest unprocessed record, per partition; 0 when caught up.",
	}, []string{"topic", "group", "partition"})
)

// declareQueueMetrics makes the series of a queue's or topic's sends exist
// at 0 from its declaration on, so that an alert on them sees 0, not no
// data.
func declareQueueMetrics(name string, duplicates bool) {
	metricSent.WithLabelValues(name)
	if duplicates {
		metricDuplicates.WithLabelValues(name)
	}
}

// declareConsumerMetrics does the same for the consumer side: a queue's
// workers (group "") or a topic's consumer group.
func declareConsumerMetrics(name, group string) {
	for _, v := range []*prometheus.CounterVec{metricReceived, metricSucceeded, metricRetried, metricDead} {
		v.WithLabelValues(name, group)
	}
	metricDuration.WithLabelValues(name, group)
}
