package contract

import (
	"errors"
	"fmt"
	"net/http"

	"switchyard/httpjson"
)

// Error is a domain error of the contract. The backend answers each with a
// status and a stable code (Status), and the bot's client maps the code back
// (ErrorOfCode), so errors.Is works on both sides of the HTTP contract.
type Error string

func (e Error) Error() string { return string(e) }

// Domain errors.
const (
	ErrUserNotFound      = Error("user not found")
	ErrLeaderNotFound    = Error("leader not found")
	ErrEventNotFound     = Error("event not found")
	ErrEventProcessed    = Error("event already processed")
	ErrLinkTaken         = Error("link already taken")
	ErrTelegramTaken     = Error("telegram id already bound to another account")
	ErrAccountBound      = Error("account already bound to another telegram id")
	ErrNoPreview         = Error("telegram id is not awaiting confirmation for this account")
	ErrAlreadyRegistered = Error("user already registered under another leader")
	ErrTokenNotFound     = Error("connect token not found")
	ErrTokenExpired      = Error("connect token expired")
	ErrTokenUsed         = Error("connect token already used by another telegram id")
	ErrUnauthorized      = Error("missing or invalid credentials")
)

// codes is the one table between domain errors and HTTP: the status and
// stable code the API answers, and (read backwards by ErrorOfCode) the
// domain error a client gets for a code.
var codes = map[Error]struct {
	status int
	code   string
}{
	ErrUserNotFound:      {http.StatusNotFound, "user_not_found"},
	ErrLeaderNotFound:    {http.StatusNotFound, "leader_not_found"},
	ErrEventNotFound:     {http.StatusNotFound, "event_not_found"},
	ErrTokenNotFound:     {http.StatusNotFound, "token_not_found"},
	ErrEventProcessed:    {http.StatusConflict, "event_processed"},
	ErrLinkTaken:         {http.StatusConflict, "link_taken"},
	ErrTelegramTaken:     {http.StatusConflict, "telegram_taken"},
	ErrAccountBound:      {http.StatusConflict, "account_bound"},
	ErrNoPreview:         {http.StatusConflict, "no_preview"},
	ErrAlreadyRegistered: {http.StatusConflict, "already_registered"},
	ErrTokenUsed:         {http.StatusConflict, "token_used"},
	ErrTokenExpired:      {http.StatusGone, "token_expired"},
	ErrUnauthorized:      {http.StatusUnauthorized, "unauthorized"},
}

// Status is the HTTP status and stable code the API answers e with; ok is
// false for an Error outside the contract's table.
func (e Error) Status() (status int, code string, ok bool) {
	c, ok := codes[e]
	return c.status, c.code, ok
}

// ErrorOfCode is the domain error whose code the backend answered, if any.
func ErrorOfCode(code string) (Error, bool) {
	for e, c := range codes {
		if c.code == code {
			return e, true
		}
	}
	return "", false
}

// InvalidError is bad input: the API answers 400 with its message.
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

// Invalidf is an *InvalidError with a formatted message.
func Invalidf(format string, args ...any) error {
	return &InvalidError{Msg: fmt.Sprintf(format, args...)}
}

// HTTPError turns a domain error into the *httpjson.Error the API answers:
// an Error of the table as its status and code, an *InvalidError as 400.
// Anything else passes through (httpjson makes it a logged 500).
func HTTPError(err error) error {
	var (
		domain  Error
		invalid *InvalidError
	)
	switch {
	case errors.As(err, &domain):
		if status, code, ok := domain.Status(); ok {
			return httpjson.Errorf(status, code, "%s", domain)
		}
	case errors.As(err, &invalid):
		return httpjson.BadRequest("%s", invalid.Msg)
	}
	return err
}
