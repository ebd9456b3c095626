package cli

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"switchyard/queue"
	"switchyard/referral"
)

// publishArgs are publish's options: the database's, the topic, and the
// instance to publish through instead of the database.
type publishArgs struct {
	cfg   config
	topic string
	url   string
	batch int
}

// defaultPublishBatch is how many lines one request of publish --url
// carries.
const defaultPublishBatch = 500

func (a *publishArgs) options() []option {
	return append(a.cfg.options("publish"),
		option{"topic", "", "pin.identity.users.v1", "topic to publish to", setString(&a.topic)},
		option{"url", "", "", "base URL of a running instance to publish through, over its admin API (the token from SWITCHYARD_ADMIN_TOKEN), instead of writing --db", setString(&a.url)},
		option{"batch", "", fmt.Sprint(defaultPublishBatch), fmt.Sprintf("lines per request with --url, 1 to %d (each request is one transaction)", queue.MaxPublishBatch), func(v string) error {
			if err := setCount(&a.batch, 1, "a number of lines, 1 or more")(v); err != nil {
				return err
			}
			if a.batch > queue.MaxPublishBatch {
				return fmt.Errorf("must be at most %d, the admin API's largest batch", queue.MaxPublishBatch)
			}
			return nil
		}})
}

// publishSecrets are what publish --url reads from the environment only.
var publishSecrets = []secretEnv{
	{"SWITCHYARD_ADMIN_TOKEN", "the instance's admin token, for --url"},
}

// publishCmd is `switchyard publish --topic T FILE.jsonl`: it appends every
// line of the file to the topic, in order, keyed by its "aggregateId", with
// progress and a summary at the end — into the database, or with --url
// through a running instance's admin API.
func publishCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var a publishArgs
	rest, err := parseFlags("publish", a.options(), args, getenv, stdout)
	if err != nil {
		return err
	}
	name, err := oneArg("publish", "FILE.jsonl", rest)
	if err != nil {
		return err
	}
	var in io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	if a.url != "" {
		token := getenv("SWITCHYARD_ADMIN_TOKEN")
		if token == "" {
			return errors.New("publish --url needs the instance's admin token in SWITCHYARD_ADMIN_TOKEN")
		}
		p := httpPublisher{base: a.url, token: token, topic: a.topic, batch: a.batch, progress: stderr, client: &http.Client{Timeout: time.Minute}}
		sum, err := p.publish(ctx, in)
		printPublished(stdout, sum)
		return err
	}
	return publish(ctx, &a.cfg, a.topic, in, stdout, stderr)
}

// publish appends in's records to topic on cfg's database, migrated and
// with the referral topics declared, so a fresh file can be published to.
func publish(ctx context.Context, cfg *config, topic string, in io.Reader, stdout, stderr io.Writer) error {
	st, err := openStore(ctx, cfg, newLogger(cfg, stderr))
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return err
	}
	if _, err := referral.New(ctx, referral.Opts{DB: st, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		return err
	}
	sum, err := referral.PublishFile(ctx, st, topic, in, stderr)
	printPublished(stdout, sum)
	return err
}

func printPublished(w io.Writer, sum referral.PublishSummary) {
	fmt.Fprintf(w, "published %d record(s) to %s", sum.Published, sum.Topic)
	if sum.Blank > 0 {
		fmt.Fprintf(w, " (%d blank line(s) skipped)", sum.Blank)
	}
	fmt.Fprintln(w)
}

// httpPublisher publishes a JSON Lines file through an instance's admin
// API: batch lines a request as one application/x-ndjson body (one
// transaction on the server), one request at a time so that the file's
// order — and so every key's — is the topic's. The next batch is read while
// one is in flight. A request also stops short of publishBatchBytes, so
// that it stays under the server's body limit (1 MiB by default).
type httpPublisher struct {
	base, token, topic string
	batch              int
	client             *http.Client
	// progress, when not nil, gets a line at most every progressEvery.
	progress      io.Writer
	progressEvery time.Duration
}

const (
	// publishBatchBytes caps one request's body.
	publishBatchBytes = 512 << 10
	// maxPublishLine caps one line, the server's default body limit.
	maxPublishLine = 1 << 20
)

// lineBatch is a batch of a file's lines, with their numbers.
type lineBatch struct {
	lines [][]byte
	nums  []int
	size  int
}

func (b *lineBatch) body() []byte {
	out := make([]byte, 0, b.size)
	for _, l := range b.lines {
		out = append(append(out, l...), '\n')
	}
	return out
}

// publish sends in's non-blank lines. A line the server refuses stops the
// run with an error naming it, after every line before it was published;
// a batch that fails otherwise stops it with an error naming the batch's
// lines, every line before them published.
func (p *httpPublisher) publish(ctx context.Context, in io.Reader) (referral.PublishSummary, error) {
	sum := referral.PublishSummary{Topic: p.topic}
	if p.progressEvery <= 0 {
		p.progressEvery = time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan *lineBatch, 1)
	var readErr error
	go func() {
		defer close(batches)
		readErr = p.read(ctx, in, batches, &sum.Blank)
	}()
	start, last := time.Now(), time.Now()
	for b := range batches {
		n, err := p.send(ctx, b)
		sum.Published += n
		if err != nil {
			cancel()
			for range batches { // let the reader end
			}
			return sum, err
		}
		if p.progress != nil && time.Since(last) >= p.progressEvery {
			last = time.Now()
			fmt.Fprintf(p.progress, "%s: %d published (%.0f/s)\n", p.topic, sum.Published, float64(sum.Published)/time.Since(start).Seconds())
		}
	}
	return sum, readErr
}

// read cuts in into batches; blank counts the blank lines skipped.
func (p *httpPublisher) read(ctx context.Context, in io.Reader, out chan<- *lineBatch, blank *int) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxPublishLine)
	b := &lineBatch{}
	emit := func() bool {
		if len(b.lines) == 0 {
			return true
		}
		select {
		case out <- b:
			b = &lineBatch{}
			return true
		case <-ctx.Done():
			return false
		}
	}
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			*blank++
			continue
		}
		if len(b.lines) == p.batch || b.size+len(line)+1 > publishBatchBytes {
			if !emit() {
				return nil
			}
		}
		b.lines = append(b.lines, bytes.Clone(line))
		b.nums = append(b.nums, n)
		b.size += len(line) + 1
	}
	if !emit() {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}

// send publishes a batch and returns how many of its lines were published.
// When the server names invalid lines, the lines before the first are
// published on their own, as publish promises.
func (p *httpPublisher) send(ctx context.Context, b *lineBatch) (int, error) {
	status, raw, err := p.post(ctx, b.body())
	lines := fmt.Sprintf("lines %d to %d", b.nums[0], b.nums[len(b.nums)-1])
	if err != nil {
		return 0, fmt.Errorf("%s: %w", lines, err)
	}
	if status == http.StatusAccepted {
		var out struct {
			Records []queue.Position `json:"records"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || len(out.Records) != len(b.lines) {
			return 0, fmt.Errorf("%s: the instance answered 202 with %d position(s) for %d line(s): %.200s", lines, len(out.Records), len(b.lines), raw)
		}
		return len(b.lines), nil
	}
	var refusal struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Invalid []struct {
			Index   int    `json:"index"`
			Message string `json:"message"`
		} `json:"invalid"`
	}
	_ = json.Unmarshal(raw, &refusal)
	if refusal.Error.Code != "invalid_records" || len(refusal.Invalid) == 0 || refusal.Invalid[0].Index >= len(b.lines) {
		msg := cmp.Or(refusal.Error.Message, strings.TrimSpace(string(raw)))
		return 0, fmt.Errorf("%s: the instance answered %d: %.300s", lines, status, msg)
	}
	bad := refusal.Invalid[0]
	badErr := fmt.Errorf("line %d: %s", b.nums[bad.Index], bad.Message)
	if bad.Index == 0 {
		return 0, badErr
	}
	before := &lineBatch{lines: b.lines[:bad.Index], nums: b.nums[:bad.Index]}
	n, err := p.send(ctx, before)
	return n, errors.Join(err, badErr)
}

func (p *httpPublisher) post(ctx context.Context, body []byte) (int, []byte, error) {
	u := strings.TrimRight(p.base, "/") + "/admin/api/topics/" + url.PathEscape(p.topic) + "/messages"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", queue.NDJSONType)
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, raw, err
}
