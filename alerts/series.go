package alerts

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Series selects the series of one metric family whose labels match, as a
// PromQL selector does: each label in Match must match its regular
// expression whole (RE2, as Prometheus's =~).
type Series struct {
	Metric string
	Match  map[string]string
}

// String is the PromQL selector: `metric{label="value",other=~"a|b"}`.
func (s Series) String() string {
	if len(s.Match) == 0 {
		return s.Metric
	}
	var b strings.Builder
	b.WriteString(s.Metric)
	b.WriteByte('{')
	for i, l := range slices.Sorted(maps.Keys(s.Match)) {
		if i > 0 {
			b.WriteByte(',')
		}
		re := s.Match[l]
		op := "=~"
		if regexp.QuoteMeta(re) == re {
			op = "="
		}
		b.WriteString(l + op + strconv.Quote(re))
	}
	b.WriteByte('}')
	return b.String()
}

// Values lists what each label of Match may be when its expression is a
// plain alternation of literals ("sent|retry|failed"), for a test that
// each has its series; a label matched by a pattern ("5..") is left out.
func (s Series) Values() map[string][]string {
	out := map[string][]string{}
	for l, re := range s.Match {
		parts := strings.Split(re, "|")
		if slices.ContainsFunc(parts, func(p string) bool { return regexp.QuoteMeta(p) != p }) {
			continue
		}
		out[l] = parts
	}
	return out
}

// matcher is Match compiled, anchored as PromQL anchors it.
type matcher map[string]*regexp.Regexp

func (s Series) matcher() matcher {
	m := matcher{}
	for l, re := range s.Match {
		m[l] = regexp.MustCompile("^(?:" + re + ")$")
	}
	return m
}

func (m matcher) matches(labels map[string]string) bool {
	for l, re := range m {
		if !re.MatchString(labels[l]) {
			return false
		}
	}
	return true
}

// sumIncrease is `sum by (by…) (increase(s[window]))`.
func sumIncrease(s Series, window time.Duration, by ...string) string {
	agg := "sum"
	if len(by) > 0 {
		agg += " by (" + strings.Join(by, ", ") + ")"
	}
	if len(by) > 0 {
		agg += " "
	}
	return fmt.Sprintf("%s(increase(%s[%s]))", agg, s, duration(window))
}
