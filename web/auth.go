package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"time"

	"switchyard/adminsession"
	"switchyard/authlimit"
	"switchyard/httpjson"
)

// sessionCookie is the cookie that carries a console session's id.
const sessionCookie = "switchyard_session"

// The authentication surfaces of this package, as authlimit logs them.
const (
	surfaceLogin    = "console-login"
	surfaceAdminAPI = "admin-api"
)

// auth checks the admin credentials: a Bearer token for the API, a session
// cookie for the console. The sessions are kept by their owner (an
// adminsession.Store, through sessionStore): the cookie carries the
// session's random id, base64url-encoded.
//
// Every presented token goes through the shared authlimit.Limiter; a
// session cookie does not (a 256-bit random id is not guessable).
type auth struct {
	sessions  sessionStore
	tokenHash [32]byte
	limiter   *authlimit.Limiter
}

// sessionStore is what auth needs of the console's sessions
// (*adminsession.Store): a session is valid only under the admin token the
// store was made with.
type sessionStore interface {
	// Start begins a session and returns its random id.
	Start(ctx context.Context) ([]byte, error)
	// Valid reports whether id names a live session.
	Valid(ctx context.Context, id []byte) (bool, error)
	// End revokes the session id names.
	End(ctx context.Context, id []byte) error
	// TTL is how long a session lasts from its start.
	TTL() time.Duration
}

func newAuth(sessions sessionStore, token string, limiter *authlimit.Limiter) *auth {
	limiter.Declare(surfaceLogin, surfaceAdminAPI)
	return &auth{sessions: sessions, tokenHash: sha256.Sum256([]byte(token)), limiter: limiter}
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

// sessionID is the id in r's session cookie, if it has a well-formed one.
func sessionID(r *http.Request) ([]byte, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, false
	}
	id, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(id) != adminsession.IDBytes {
		return nil, false
	}
	return id, true
}

// newSession starts a session and sets its cookie.
func (a *auth) newSession(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	id, err := a.sessions.Start(ctx)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    base64.RawURLEncoding.EncodeToString(id),
		Path:     "/admin",
		MaxAge:   int(a.sessions.TTL().Seconds()),
		HttpOnly: true,
		Secure:   isHTTPS(r),
		SameSite: http.SameSiteStrictMode,
	})
	return nil
}

// endSession revokes r's session, if it has one, and clears the cookie.
func (a *auth) endSession(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	if id, ok := sessionID(r); ok {
		if err := a.sessions.End(ctx, id); err != nil {
			return err
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
	return a.sessions.Valid(r.Context(), id)
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
