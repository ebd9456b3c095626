package store

import (
	"database/sql/driver"
	"fmt"
	"time"
)

// TimeLayout is how times are stored in SQLite: UTC, fixed-width microseconds,
// so that text order is time order.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

// Timestamp is a time column. The zero Timestamp is SQL NULL, so one type
// serves nullable and non-nullable columns. On SQLite it is stored as
// TimeLayout text; a PostgreSQL dialect would pass time.Time through.
type Timestamp struct{ time.Time }

// TS wraps t.
func TS(t time.Time) Timestamp { return Timestamp{t} }

// Value implements driver.Valuer.
func (t Timestamp) Value() (driver.Value, error) {
	if t.IsZero() {
		return nil, nil
	}
	return t.UTC().Format(TimeLayout), nil
}

// Scan implements sql.Scanner.
func (t *Timestamp) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		t.Time = time.Time{}
		return nil
	case time.Time:
		t.Time = v.UTC()
		return nil
	case string:
		return t.parse(v)
	case []byte:
		return t.parse(string(v))
	default:
		return fmt.Errorf("store: cannot scan %T into Timestamp", src)
	}
}

func (t *Timestamp) parse(s string) error {
	p, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("store: bad timestamp %q: %w", s, err)
	}
	t.Time = p.UTC()
	return nil
}

// Ptr returns nil for the zero Timestamp, else a pointer to the time (for JSON).
func (t Timestamp) Ptr() *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
