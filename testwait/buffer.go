package testwait

import (
	"bytes"
	"encoding/json"
	"sync"
)

// Buffer is a log sink for tests, safe for the concurrent writers a
// running app has: a test hands it to slog and waits (Until) for a line.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines decodes what was written as JSON log lines, one object a line;
// a line that is not a JSON object is left out.
func (b *Buffer) Lines() []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range bytes.Split(b.buf.Bytes(), []byte("\n")) {
		var m map[string]any
		if len(l) > 0 && json.Unmarshal(l, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}
