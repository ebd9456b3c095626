package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"switchyard/authlimit"
	"switchyard/httpjson"
	"switchyard/store"
)

const (
	sessionCookie = "switchyard_session"
	sessionTTL    = 12 * time.Hour
	// sessionIDBytes is the size of a session's random id.
	sessionIDBytes = 32
)

// The authentication surfaces of this package, as authlimit logs them.
const (
	surfaceLogin    = "console-login"
	surfaceAdminAPI = "admin-api"
)

// auth checks the admin credentials: a Bearer token for the API, a session
// cookie for the console. A session is a row of admin_sessions (migration
// 00009, owned here): the cookie carries a random 32-byte id and the row
// only its SHA-256, with its expiry and a fingerprint of the admin token it
// was issued under. Logging out deletes the row; changing the token ends
// every session, because a row counts only under the token it names.
//
// Every presented token goes through the shared authlimit.Limiter; a
// session cookie does not (a 256-bit random id is not guessable).
type auth struct {
	db        *store.DB
	tokenHash [32]byte
	tokenFP   string
	limiter   *authlimit.Limiter
}

func newAuth(db *store.DB, token string, limiter *authlimit.Limiter) *auth {
	limiter.Declare(surfaceLogin, surfaceAdminAPI)
	fp := sha256.Sum256([]byte("switchyard admin session token\x00" + token))
	return &auth{db: db, tokenHash: sha256.Sum256([]byte(token)), tokenFP: hex.EncodeToString(fp[:]), limiter: limiter}
}

// tokenOK compares in constant time. Hashing first makes both sides the same
// length, so not even the token's length leaks.
func (a *auth) tokenOK(candidate string) bool {
	h := sha256.Sum256([]byte(candidate))
	return subtle.ConstantTimeCompare(h[:], a.tokenHash[:]) == 1
}

// checkToken is one attempt with a presented admin token on surface. An
// empty token is no attempt: it is refused without counting.
func (a *auth) checkToken(r *http.Request, surface, candidate string) (authlimit.Verdict, time.Duration) {
	if candidate == "" {
		return authlimit.Refused, 0
	}
	return a.limiter.Check(r, surface, func() bool { return a.tokenOK(candidate) })
}

// BearerToken returns the token of an "Authorization: Bearer <token>" header.
func BearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return strings.TrimSpace(h[len(prefix):]), true
}

// sessionKey is how a session id is kept: the hex of its SHA-256.
func sessionKey(id []byte) string {
	h := sha256.Sum256(id)
	return hex.EncodeToString(h[:])
}

// sessionID is the id in r's session cookie, if it has a well-formed one.
func sessionID(r *http.Request) ([]byte, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, false
	}
	id, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(id) != sessionIDBytes {
		return nil, false
	}
	return id, true
}

const (
	// pruneSessionsQuery deletes what can never open the console again.
	pruneSessionsQuery = `delete from admin_sessions where expires_at <= ? or token_fp <> ?`
	insertSessionQuery = `insert into admin_sessions (id_hash, token_fp, created_at, expires_at) values (?, ?, ?, ?)`
	sessionValidQuery  = `select count(*) from admin_sessions where id_hash = ? and token_fp = ? and expires_at > ?`
	deleteSessionQuery = `delete from admin_sessions where id_hash = ?`
)

// newSession starts a session and sets its cookie. Expired sessions and
// those of an old token are pruned in the same transaction.
func (a *auth) newSession(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	id := make([]byte, sessionIDBytes)
	if _, err := rand.Read(id); err != nil {
		return fmt.Errorf("session id: %w", err)
	}
	now := a.db.Now()
	err := a.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, pruneSessionsQuery, store.TS(now), a.tokenFP); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, insertSessionQuery, sessionKey(id), a.tokenFP, store.TS(now), store.TS(now.Add(sessionTTL)))
		return err
	})
	if err != nil {
		return fmt.Errorf("store the session: %w", err)
	}
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    base64.RawURLEncoding.EncodeToString(id),
		Path:     "/admin",
		MaxAge:   int(sessionTTL.Seconds()),
		HttpOnly: true,
		Secure:   isHTTPS(r),
		SameSite: http.SameSiteStrictMode,
	})
	return nil
}

// endSession revokes r's session, if it has one, and clears the cookie.
func (a *auth) endSession(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	if id, ok := sessionID(r); ok {
		err := a.db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, deleteSessionQuery, sessionKey(id))
			return err
		})
		if err != nil {
			return fmt.Errorf("revoke the session: %w", err)
		}
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: "/admin", MaxAge: -1,
		HttpOnly: true, Secure: isHTTPS(r), SameSite: http.SameSiteStrictMode,
	})
	return nil
}

// sessionOK reports whether r carries a live session issued under the
// current admin token. The error is a failed read, not a bad cookie.
func (a *auth) sessionOK(r *http.Request) (bool, error) {
	id, ok := sessionID(r)
	if !ok {
		return false, nil
	}
	var n int
	err := a.db.Read.QueryRowContext(r.Context(), sessionValidQuery, sessionKey(id), a.tokenFP, store.TS(a.db.Now())).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("read the session: %w", err)
	}
	return n == 1, nil
}

func isHTTPS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// requireAPI lets a request through with the admin Bearer token or a console
// session; anything else is a 401 that does not say what was wrong, and a
// client throttled for failed attempts gets 429 for its token unchecked.
func (a *auth) requireAPI(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := BearerToken(r); ok {
			switch v, wait := a.checkToken(r, surfaceAdminAPI, tok); v {
			case authlimit.Allowed:
				next.ServeHTTP(w, r)
				return
			case authlimit.Throttled:
				httpjson.WriteError(w, r, httpjson.TooManyAttempts(w, wait))
				return
			}
		}
		ok, err := a.sessionOK(r)
		if err != nil {
			httpjson.WriteError(w, r, err)
			return
		}
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		httpjson.WriteError(w, r, httpjson.Unauthorized())
	})
}

// requireSession sends console visitors without a session to the login page.
func (a *auth) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, err := a.sessionOK(r)
		if err != nil {
			httpjson.WriteError(w, r, err)
			return
		}
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			httpjson.WriteError(w, r, httpjson.Unauthorized())
			return
		}
		http.Redirect(w, r, "/admin/login?next="+url.QueryEscape(safeNext(r.URL.RequestURI())), http.StatusSeeOther)
	})
}

// safeNext keeps a post-login redirect inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/admin") || strings.HasPrefix(next, "/admin/login") || strings.ContainsAny(next, "\\\r\n") {
		return "/admin"
	}
	return next
}
