package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"switchyard/web/httpjson"
)

const (
	sessionCookie = "switchyard_session"
	sessionTTL    = 12 * time.Hour
)

// auth checks the admin credentials: a Bearer token for the API, a signed
// session cookie for the console. Sessions are stateless: the cookie holds an
// expiry and an HMAC of it keyed by the admin token, so changing the token
// ends every session.
type auth struct {
	tokenHash [32]byte
	macKey    []byte
	now       func() time.Time
}

func newAuth(token string, now func() time.Time) *auth {
	key := sha256.Sum256([]byte("switchyard-session\x00" + token))
	return &auth{tokenHash: sha256.Sum256([]byte(token)), macKey: key[:], now: now}
}

// tokenOK compares in constant time. Hashing first makes both sides the same
// length, so not even the token's length leaks.
func (a *auth) tokenOK(candidate string) bool {
	h := sha256.Sum256([]byte(candidate))
	return subtle.ConstantTimeCompare(h[:], a.tokenHash[:]) == 1
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

func (a *auth) sign(expiry int64) string {
	m := hmac.New(sha256.New, a.macKey)
	m.Write([]byte(strconv.FormatInt(expiry, 10)))
	return hex.EncodeToString(m.Sum(nil))
}

func (a *auth) newSession(w http.ResponseWriter, r *http.Request) {
	exp := a.now().Add(sessionTTL).Unix()
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    strconv.FormatInt(exp, 10) + "." + a.sign(exp),
		Path:     "/admin",
		MaxAge:   int(sessionTTL.Seconds()),
		HttpOnly: true,
		Secure:   isHTTPS(r),
		SameSite: http.SameSiteStrictMode,
	})
}

func (a *auth) endSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: "/admin", MaxAge: -1,
		HttpOnly: true, Secure: isHTTPS(r), SameSite: http.SameSiteStrictMode,
	})
}

func (a *auth) sessionOK(r *http.Request) bool {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return false
	}
	expStr, mac, ok := strings.Cut(c.Value, ".")
	if !ok {
		return false
	}
	exp, err := strconv.ParseInt(expStr, 10, 64)
	if err != nil || a.now().Unix() >= exp {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(a.sign(exp)))
}

func isHTTPS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// requireAPI lets a request through with the admin Bearer token or a console
// session; anything else is a 401 that does not say what was wrong.
func (a *auth) requireAPI(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := BearerToken(r); ok && a.tokenOK(tok) {
			next.ServeHTTP(w, r)
			return
		}
		if a.sessionOK(r) {
			next.ServeHTTP(w, r)
			return
		}
		httpjson.WriteError(w, r, httpjson.Unauthorized())
	})
}

// requireSession sends console visitors without a session to the login page.
func (a *auth) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.sessionOK(r) {
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
