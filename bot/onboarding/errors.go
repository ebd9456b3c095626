package onboarding

import (
	"context"
	"database/sql"

	"switchyard/bot/contract"
)

// Error is a domain error of the onboarding bot's own (the contract's are
// contract.Error).
type Error string

func (e Error) Error() string { return string(e) }

type scanner interface{ Scan(dest ...any) error }

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func uidPtr(n sql.NullInt64) *contract.UID {
	if !n.Valid {
		return nil
	}
	u := contract.UID(n.Int64)
	return &u
}

func nullUID(u *contract.UID) any {
	if u == nil {
		return nil
	}
	return int64(*u)
}
