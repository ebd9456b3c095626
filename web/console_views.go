package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"switchyard/mask"
)

// This file holds what the console's view models share: how times, counts
// and payloads are written, and the data of the small throughput charts.

// timeLayout is how the console writes times: UTC to the second.
const timeLayout = "2006-01-02 15:04:05"

// when is a time as the console shows it, "—" for none.
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format(timeLayout)
}

// whenPtr is when for an optional time.
func whenPtr(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return when(*t)
}

// ago is how long before now t was, coarsely ("12s ago", "3m ago", "in 4m").
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	if d := now.Sub(t); d >= 0 {
		return coarse(d) + " ago"
	}
	return "in " + coarse(t.Sub(now))
}

func coarse(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	default:
		return strconv.Itoa(int(d.Hours()/24)) + "d"
	}
}

// ageText is a duration as a queue's oldest message age.
func ageText(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	}
	return d.Round(time.Second).String()
}

func count(n int64) string { return strconv.FormatInt(n, 10) }

func countInt(n int) string { return strconv.Itoa(n) }

// clip shortens s to at most n runes, with an ellipsis when cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// Masking. The console shows payloads pretty-printed, with every phone
// number masked as the logs mask them (package mask: +7***1234) and every
// value of a field that names a secret replaced.
var secretKeys = []string{"secret", "password", "token", "apikey", "api_key", "authorization"}

func isSecretKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range secretKeys {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// prettyPayload indents a JSON payload in its own key order, masking phone
// numbers and secrets; anything that is not JSON is shown as text with phone
// numbers masked. An empty payload is "—".
func prettyPayload(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "—"
	}
	if !json.Valid(raw) {
		if !utf8.Valid(raw) {
			return fmt.Sprintf("(%d bytes of binary data)", len(raw))
		}
		return mask.Phones(string(raw))
	}
	var out strings.Builder
	if err := writePretty(&out, json.NewDecoder(bytes.NewReader(raw))); err != nil {
		return mask.Phones(string(raw))
	}
	return out.String()
}

// prettyFrame is an open object or array of writePretty.
type prettyFrame struct {
	object bool
	n      int    // values written so far
	key    string // the key of the value about to be written (objects)
	isKey  bool   // the next token is a key
}

// writePretty re-emits a JSON token stream with two-space indents.
func writePretty(w *strings.Builder, dec *json.Decoder) error {
	dec.UseNumber()
	var stack []*prettyFrame
	indent := func() { w.WriteString("\n" + strings.Repeat("  ", len(stack))) }
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var top *prettyFrame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if top.n > 0 {
				indent()
			}
			w.WriteRune(rune(d))
			if len(stack) > 0 {
				stack[len(stack)-1].isKey = stack[len(stack)-1].object
			}
			continue
		}
		if top != nil && top.object && top.isKey {
			if top.n > 0 {
				w.WriteString(",")
			}
			indent()
			key, _ := tok.(string)
			b, _ := json.Marshal(key)
			w.Write(b)
			w.WriteString(": ")
			top.key, top.isKey = key, false
			top.n++
			continue
		}
		if top != nil && !top.object {
			if top.n > 0 {
				w.WriteString(",")
			}
			indent()
			top.n++
		}
		key := ""
		if top != nil && top.object {
			key = top.key
		}
		switch v := tok.(type) {
		case json.Delim:
			w.WriteRune(rune(v))
			stack = append(stack, &prettyFrame{object: v == '{', isKey: v == '{'})
			continue
		case string:
			if key != "" && isSecretKey(key) {
				v = "•••"
			} else {
				v = mask.Field(key, v)
			}
			b, _ := json.Marshal(v)
			w.Write(b)
		case json.Number:
			// A number is an id, a count or a time unless its key or its
			// digits say phone (mask.Number): then it is shown masked, as a
			// string.
			if m := mask.Number(key, v.String()); m != v.String() {
				b, _ := json.Marshal(m)
				w.Write(b)
			} else {
				w.WriteString(v.String())
			}
		case bool:
			w.WriteString(strconv.FormatBool(v))
		case nil:
			w.WriteString("null")
		}
		if top != nil && top.object {
			top.isKey = true
		}
	}
}

// formField is a hidden field of a confirmation form.
type formField struct{ Name, Value string }

func sortFields(f []formField) {
	slices.SortFunc(f, func(a, b formField) int { return strings.Compare(a.Name, b.Name) })
}

// confirmModel is the confirmation page of a destructive action.
type confirmModel struct {
	Question string
	Button   string
	Action   string
	Back     string
	Fields   []formField
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func viewBox(w, h int) string { return "0 0 " + strconv.Itoa(w) + " " + strconv.Itoa(h) }

// lowerFirst lower-cases a label's first letter ("Redrive" → "redrive").
func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return strings.ToLower(string(r)) + s[n:]
}
