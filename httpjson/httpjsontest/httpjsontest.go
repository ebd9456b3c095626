// Package httpjsontest serves requests to the app's handlers in tests and
// checks their JSON answers: that bad input gets a clear 4xx in the JSON
// error shape, and that every time is written in httpjson.TimeLayout.
package httpjsontest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"
)

// timeLayout is httpjson.TimeLayout as a pattern.
var timeLayout = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$`)

// BadTimes returns every string in the JSON document body that parses as an
// RFC 3339 time but is not written in httpjson.TimeLayout, with where it is
// ("$.events[0].createdAt"); nil when there is none. A body that is not JSON
// is an error.
func BadTimes(body []byte) ([]string, error) {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	var bad []string
	var walk func(at string, v any)
	walk = func(at string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				walk(at+"."+k, c)
			}
		case []any:
			for i, c := range x {
				walk(fmt.Sprintf("%s[%d]", at, i), c)
			}
		case string:
			if _, err := time.Parse(time.RFC3339Nano, x); err == nil && !timeLayout.MatchString(x) {
				bad = append(bad, fmt.Sprintf("%s = %q", at, x))
			}
		}
	}
	walk("$", v)
	return bad, nil
}

// Times counts the strings in body that are times in httpjson.TimeLayout,
// so a test can tell it checked some.
func Times(body []byte) int {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return 0
	}
	n := 0
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		case string:
			if timeLayout.MatchString(x) {
				n++
			}
		}
	}
	walk(v)
	return n
}
