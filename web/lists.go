package web

import (
	"context"
	"net/url"
	"strconv"
	"strings"
)

// countCap bounds a count that would read rows rather than an index (a text
// search), and the count of a window's position: past it a list says
// "10,000+", and a window deep in the middle of a long list says how many
// rows it shows, not where it sits.
const countCap = 10_000

// counter counts the rows of a list's filters in a window (the rows older
// than w.Before, newer than w.After, or all of them), up to upTo when it is
// above zero — returning upTo+1 for "more" — or all of them.
type counter func(ctx context.Context, w window, upTo int64) (int64, error)

// place sets where p's window sits in its list: the rows matching (exactly,
// or bounded at countCap when bounded is set, for a count that reads rows)
// and the rows before the window — counted newer than its first row, or,
// deep in a long list, as the total less the rows older than its last. Each
// count is bounded or an index's, so placing a window costs the same at any
// depth.
func (p *pager) place(ctx context.Context, count counter, w window, firstKey, lastKey string, bounded bool) error {
	var upTo int64
	if bounded {
		upTo = countCap
	}
	total, err := count(ctx, window{}, upTo)
	if err != nil {
		return err
	}
	p.Total, p.Capped = total, bounded && total > countCap
	if p.Capped {
		p.Total = countCap
	}
	switch {
	case w.First():
		p.Offset = 0
		return nil
	case p.Shown == 0:
		return nil
	}
	newer, err := count(ctx, window{After: firstKey}, countCap)
	if err != nil {
		return err
	}
	if newer <= countCap {
		p.Offset = newer
		return nil
	}
	if p.Capped {
		return nil
	}
	older, err := count(ctx, window{Before: lastKey}, countCap)
	if err != nil {
		return err
	}
	if older <= countCap {
		p.Offset = total - older - int64(p.Shown)
	}
	return nil
}

// searchTerm is a list's search term from its query string or form (q),
// trimmed and at most maxKeyLen bytes.
func searchTerm(v url.Values) string {
	q := strings.TrimSpace(v.Get("q"))
	if len(q) > maxKeyLen {
		q = strings.ToValidUTF8(q[:maxKeyLen], "")
	}
	return q
}

// int64Key reads a window key that is a positive number; zero for another.
func int64Key(k string) int64 {
	n, err := strconv.ParseInt(k, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
