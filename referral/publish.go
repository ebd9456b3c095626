package referral

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"switchyard/queue"
	"switchyard/store"
)

// PublishSummary tells what PublishFile did.
type PublishSummary struct {
	Topic     string
	Published int // records appended (and committed)
	Blank     int // empty lines skipped
}

// publishBatch is how many lines share one transaction.
const publishBatch = 500

// maxLine caps one JSONL line (the admin API's body cap).
const maxLine = 1 << 20

// PublishFile publishes a JSON Lines file to a declared topic, in file
// order, for `switchyard publish --topic T FILE.jsonl`: each non-empty line
// is a JSON object whose "aggregateId" string is the record's key, exactly as
// POST /admin/api/topics/{topic}/messages takes it. Lines are committed in
// batches of 500, each one transaction (Topic.PublishBatch); a bad line stops
// the run with an error naming it, after every line before it was committed,
// and a batch that fails to commit with one naming its lines. Publishing a
// file again is harmless for the referral consumers (their marks make each
// messageId take effect once). progress, when not nil, gets a line per batch.
func PublishFile(ctx context.Context, db *store.DB, topic string, r io.Reader, progress io.Writer) (PublishSummary, error) {
	sum := PublishSummary{Topic: topic}
	t, err := declaredTopic(ctx, db, topic)
	if err != nil {
		return sum, err
	}
	type line struct {
		n     int
		key   string
		value []byte
	}
	var batch []line
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		recs := make([]queue.KeyValue, len(batch))
		for i, l := range batch {
			recs[i] = queue.KeyValue{Key: l.key, Value: l.value}
		}
		if _, err := t.PublishBatch(ctx, recs); err != nil {
			return fmt.Errorf("lines %d to %d: %w", batch[0].n, batch[len(batch)-1].n, err)
		}
		sum.Published += len(batch)
		batch = batch[:0]
		if progress != nil {
			fmt.Fprintf(progress, "%s: %d published\n", topic, sum.Published)
		}
		return nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	for n := 1; sc.Scan(); n++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			sum.Blank++
			continue
		}
		var fields map[string]json.RawMessage
		if raw[0] != '{' || json.Unmarshal(raw, &fields) != nil {
			return sum, errors.Join(flush(), fmt.Errorf("line %d: not a JSON object", n))
		}
		var key string
		if v, ok := fields["aggregateId"]; ok {
			_ = json.Unmarshal(v, &key)
		}
		if key == "" {
			return sum, errors.Join(flush(), fmt.Errorf(`line %d: no "aggregateId" string to use as the key`, n))
		}
		batch = append(batch, line{n: n, key: key, value: bytes.Clone(raw)})
		if len(batch) == publishBatch {
			if err := flush(); err != nil {
				return sum, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return sum, errors.Join(flush(), fmt.Errorf("read: %w", err))
	}
	return sum, flush()
}

// declaredTopic opens a topic some process declared, keeping its partition
// count and retention.
func declaredTopic(ctx context.Context, db *store.DB, name string) (*queue.Topic, error) {
	st, err := queue.NewAdmin(queue.AdminOpts{DB: db}).Stats(ctx)
	if err != nil {
		return nil, err
	}
	for _, ts := range st.Topics {
		if ts.Name == name {
			return queue.NewTopic(ctx, queue.TopicOpts{DB: db, Name: name, Partitions: len(ts.Partitions), Retention: ts.Retention})
		}
	}
	return nil, fmt.Errorf("topic %s: %w", name, queue.ErrNotFound)
}
