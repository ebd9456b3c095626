package web

import (
	"context"
	"fmt"
	"strings"
	"time"

	"switchyard/retention"
)

// retentionOps is what the Overview reads of the retention runner.
type retentionOps interface {
	Status(ctx context.Context) (retention.Status, error)
}

// retentionModel is the Overview's database space and retention table.
type retentionModel struct {
	Size, Free, WAL string
	// AutoVacuum is the SQLite file's mode; empty on PostgreSQL.
	AutoVacuum string
	// FreePages is what the last pass returned of the free pages, "" when
	// none ran.
	FreePages string
	Rules     []retentionRow
}

// retentionRow is one rule: its setting and what it removed last.
type retentionRow struct {
	Name, Option, Tables, Keep string
	// Last is "" when the rule never ran; Rows, Took and Longest are its
	// last pass's.
	Last, Rows, Took, Longest, Error string
}

// retentionView builds the model; nil without a runner.
func (s *Server) retentionView(ctx context.Context, now time.Time) (*retentionModel, error) {
	if s.opts.Retention == nil {
		return nil, nil
	}
	st, err := s.opts.Retention.Status(ctx)
	if err != nil {
		return nil, err
	}
	m := &retentionModel{
		Size:       bytesText(st.Space.DatabaseBytes),
		Free:       bytesText(st.Space.FreeBytes),
		WAL:        bytesText(st.Space.WALBytes),
		AutoVacuum: string(st.Space.AutoVacuum),
	}
	if st.FreePages != nil {
		m.FreePages = fmt.Sprintf("%d pages returned %s", st.FreePages.Rows, ago(now, st.FreePages.At))
	}
	for _, r := range st.Rules {
		row := retentionRow{Name: r.Name, Option: r.Option, Tables: strings.Join(r.Tables, ", "), Keep: keepText(r.Keep)}
		if l := r.Last; l != nil {
			row.Last, row.Rows = ago(now, l.At), count(l.Rows)
			row.Took, row.Longest, row.Error = msText(l.Took), msText(l.LongestBatch), l.Error
		}
		m.Rules = append(m.Rules, row)
	}
	return m, nil
}

// keepText is a rule's setting: "7d", "36h", "for ever".
func keepText(d time.Duration) string {
	switch {
	case d <= 0:
		return "for ever"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// msText is a short duration in milliseconds.
func msText(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// bytesText is a size in B, KiB, MiB or GiB.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, suffix := float64(n), ""
	for _, s := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		suffix = s
		if f < unit {
			break
		}
	}
	return fmt.Sprintf("%.1f %s", f, suffix)
}
