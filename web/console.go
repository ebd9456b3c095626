package web

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/gorilla/mux"

	"switchyard/authlimit"
	"switchyard/httpjson"
)

// The console: server-rendered pages (templ) under /admin, behind the session
// cookie and the cross-origin protection of the /admin subrouter. Every page
// reads fully without JavaScript; with it, htmx polls the page's "live"
// fragment (the same URL, rendered with templ.RenderFragments) every two
// seconds unless the operator paused it. State changes are POST forms that
// answer with a redirect and a flash message; the destructive ones carry
// confirm=yes from an inline confirmation step and, without it, answer with a
// confirmation page instead of acting.

// liveFragment is the id of the templ.Fragment a page refreshes by polling.
const liveFragment = "live"

func (s *Server) consoleRoutes(r *mux.Router) {
	get := func(path string, h http.HandlerFunc) { r.HandleFunc(path, h).Methods(http.MethodGet, http.MethodHead) }
	post := func(path string, h http.HandlerFunc) { r.HandleFunc(path, h).Methods(http.MethodPost) }
	post("/demo/start", s.demoStart)
	post("/demo/stop", s.demoStop)

	get("", s.overview)
	get("/", s.overview)

	get("/bot", s.botPage)
	get("/bot/events/{id:[0-9]+}", s.botEvent)
	post("/bot/events/{id:[0-9]+}/redrive", s.botRedrive)
	post("/bot/events/redrive", s.botRedriveDead)
	post("/bot/dms/{id}/redrive", s.botDMRedrive)
	post("/bot/dms/redrive", s.botRedriveDMs)
	get("/bot/funnel", s.botFunnel)
	get("/bot/users/{tg:[0-9]+}", s.botUser)

	get("/referral", s.referralPage)
	get("/referral/users", s.referralFindUser)
	get("/referral/users/{id}", s.referralUser)
	post("/referral/links", s.referralCreateLink)
	post("/referral/links/{id}/delete", s.referralDeleteLink)
	get("/referral/links", s.referralLinks)
	post("/referral/links/delete", s.referralDeleteLinks)
	get("/referral/replicas", s.referralReplicas)

	get("/chat", s.chatInbox)
	get("/chat/threads/{id:[0-9]+}", s.chatThread)
	post("/chat/threads/{id:[0-9]+}/reply", s.chatReply)
	post("/chat/threads/{id:[0-9]+}/read", s.chatRead)
	post("/chat/threads/{id:[0-9]+}/close", s.chatClose)

	post("/theme", s.setTheme)

	get("/search", s.search)
	get("/traces/{id}", s.tracePage)

	get("/queues", s.queuesPage)
	get("/queues/{queue}", s.queueDetail)
	s.attemptRoutes(get)
	post("/queues/{queue}/dead/redrive", s.queueRedrive)
	post("/queues/{queue}/dead/purge", s.queuePurgeDead)
	post("/queues/{queue}/pause", s.queuePause) // a topic's group, if any, in the form
	post("/queues/{queue}/resume", s.queueResume)
	post("/queues/{queue}/purge", s.queuePurge)

	if s.opts.Sandbox != nil {
		s.sandboxConsoleRoutes(r)
	}
}

// isFragmentRequest reports whether htmx asks for the live fragment only.
func isFragmentRequest(r *http.Request) bool { return r.Header.Get("HX-Request") == "true" }

// newPage is the layout's model for a page: the flash message of the last
// action (taken once, on a full page load), the nav and the URL to poll.
func (s *Server) newPage(w http.ResponseWriter, r *http.Request, title, active string) page {
	p := page{Title: title, Active: active, Sandbox: s.opts.Sandbox != nil, Self: r.URL.RequestURI()}
	if !isFragmentRequest(r) {
		p.Flash = takeFlash(w, r)
	}
	return p
}

// render writes a component with status 200.
func (s *Server) render(w http.ResponseWriter, r *http.Request, c templ.Component) {
	s.renderStatus(w, r, http.StatusOK, c)
}

// renderStatus renders into a buffer first, so a failing component becomes a
// clean 500 instead of half a page. An htmx poll gets the live fragment only.
func (s *Server) renderStatus(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	var buf bytes.Buffer
	var err error
	if isFragmentRequest(r) {
		err = templ.RenderFragments(r.Context(), &buf, c, liveFragment)
	} else {
		err = c.Render(withTheme(r), &buf)
	}
	if err != nil {
		s.log.ErrorContext(r.Context(), "render page", slog.String("path", r.URL.Path), slog.Any("err", err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if isFragmentRequest(r) && status == http.StatusOK && liveUnchanged(w, r, buf.Bytes()) {
		return
	}
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// liveUnchanged tags a live fragment with an ETag over its bytes and, when
// the poll's If-None-Match (the tag of the fragment the page shows, which
// console.js sends back) names it, answers 304 with no body: polling a page
// where nothing changed costs the client a few header bytes and no swap.
// Cache-Control stays no-store, so the browser keeps no copy of its own: a
// 304 reaches only the script that asked (it skips the swap), and a page
// loaded after an action is always rendered afresh.
func liveUnchanged(w http.ResponseWriter, r *http.Request, fragment []byte) bool {
	h := fnv.New64a()
	_, _ = h.Write(fragment)
	tag := `"` + strconv.FormatUint(h.Sum64(), 36) + `"`
	w.Header().Set("ETag", tag)
	if !etagMatches(r.Header.Get("If-None-Match"), tag) {
		return false
	}
	w.Header().Del("Content-Type")
	w.WriteHeader(http.StatusNotModified)
	return true
}

// etagMatches reports whether an If-None-Match header names tag (weak
// comparison, as RFC 9110 asks of If-None-Match).
func etagMatches(header, tag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == tag || t == "*" {
			return true
		}
	}
	return false
}

// problem renders a page that only says what went wrong, with status.
func (s *Server) problem(w http.ResponseWriter, r *http.Request, status int, active, text string) {
	p := s.newPage(w, r, http.StatusText(status), active)
	s.renderStatus(w, r, status, messagePage(p, text))
}

// failed logs an unexpected error of a console read and renders a 500 page.
func (s *Server) failed(w http.ResponseWriter, r *http.Request, active string, err error) {
	s.log.ErrorContext(r.Context(), "console page failed", slog.String("path", r.URL.Path), slog.Any("err", err))
	s.problem(w, r, http.StatusInternalServerError, active, "Something went wrong reading this page; the log has the details.")
}

// Flash messages survive one redirect in a short-lived cookie, so a reload
// of the page an action led to does not show the message again.
const flashCookie = "switchyard_flash"

// flash is the outcome of the last console action.
type flash struct {
	OK   bool
	Text string
}

func setFlash(w http.ResponseWriter, r *http.Request, ok bool, text string) {
	kind := "error"
	if ok {
		kind = "ok"
	}
	http.SetCookie(w, &http.Cookie{
		Name: flashCookie, Value: url.QueryEscape(kind + ":" + text), Path: "/admin", MaxAge: 60,
		HttpOnly: true, Secure: isHTTPS(r), SameSite: http.SameSiteStrictMode,
	})
}

func takeFlash(w http.ResponseWriter, r *http.Request) *flash {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return nil
	}
	http.SetCookie(w, &http.Cookie{
		Name: flashCookie, Value: "", Path: "/admin", MaxAge: -1, Expires: time.Unix(1, 0),
		HttpOnly: true, Secure: isHTTPS(r), SameSite: http.SameSiteStrictMode,
	})
	v, err := url.QueryUnescape(c.Value)
	if err != nil {
		return nil
	}
	kind, text, ok := strings.Cut(v, ":")
	if !ok || text == "" {
		return nil
	}
	return &flash{OK: kind == "ok", Text: text}
}

// done ends a console action: a flash message and a 303 back to a console page.
func (s *Server) done(w http.ResponseWriter, r *http.Request, to string, ok bool, text string) {
	setFlash(w, r, ok, text)
	http.Redirect(w, r, safeNext(to), http.StatusSeeOther)
}

// actionFailed ends an action that failed: the operator's mistake is said as
// it is; anything else is logged and reported without details.
func (s *Server) actionFailed(w http.ResponseWriter, r *http.Request, to string, err error, userErr bool) {
	if userErr {
		s.done(w, r, to, false, err.Error())
		return
	}
	if errors.Is(err, r.Context().Err()) && r.Context().Err() != nil {
		return
	}
	s.log.ErrorContext(r.Context(), "console action failed", slog.String("path", r.URL.Path), slog.Any("err", err))
	s.done(w, r, to, false, "The action failed; the log has the details.")
}

// confirmed reports whether a destructive form carries the confirmation. When
// it does not, it renders the confirmation page (a form that posts the same
// fields again with confirm=yes) and the handler must stop.
// back is where Cancel leads.
func (s *Server) confirmed(w http.ResponseWriter, r *http.Request, active, question, button, back string) bool {
	if r.PostForm.Get("confirm") == "yes" {
		return true
	}
	m := confirmModel{Question: question, Button: button, Action: r.URL.Path, Back: safeNext(back)}
	for k, vs := range r.PostForm {
		if k == "confirm" {
			continue
		}
		for _, v := range vs {
			m.Fields = append(m.Fields, formField{Name: k, Value: v})
		}
	}
	sortFields(m.Fields)
	p := s.newPage(w, r, "Confirm", active)
	// The page answers a POST: the theme switch leads back to where Cancel
	// does, an address that takes a GET.
	p.Self = m.Back
	s.render(w, r, confirmPage(p, m))
	return false
}

// parseForm reads a POST form; a broken one ends the request with a flash.
func (s *Server) parseForm(w http.ResponseWriter, r *http.Request, back string) bool {
	if err := r.ParseForm(); err != nil {
		s.done(w, r, back, false, "The form could not be read.")
		return false
	}
	return true
}

// backTo is the console page a form asked to return to, or fallback.
func backTo(r *http.Request, fallback string) string {
	if b := r.PostForm.Get("back"); b != "" {
		return safeNext(b)
	}
	return fallback
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	// A poll whose session ran out was redirected here: send the whole page
	// to the login form rather than swapping the form into a live region.
	if isFragmentRequest(r) {
		if u, err := url.Parse(r.Header.Get("HX-Current-URL")); err == nil {
			next = safeNext(u.RequestURI())
		}
		w.Header().Set("HX-Redirect", "/admin/login?next="+url.QueryEscape(next))
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// A one-click login link carries the token in the query (as Jupyter's does);
	// it is exchanged for a session cookie and dropped from the address bar.
	if tok := r.URL.Query().Get("token"); tok != "" {
		s.tryLogin(w, r, next, tok)
		return
	}
	if ok, err := s.auth.sessionOK(r); err != nil {
		s.loginFailed(w, r, next, err)
		return
	} else if ok {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	s.render(w, r, loginView(next, ""))
}

// loginBodyLimit caps the login form: a token and a return path.
const loginBodyLimit = 4 << 10

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, loginBodyLimit)
	if err := r.ParseForm(); err != nil {
		if httpjson.IsTimeout(err) {
			// The server's read timeout cut the body and ended the request's
			// context, so no page renders: a plain 408.
			httpjson.WriteError(w, r, httpjson.RequestTimeout())
			return
		}
		status := http.StatusBadRequest
		if maxed := (*http.MaxBytesError)(nil); errors.As(err, &maxed) {
			status = http.StatusRequestEntityTooLarge
		}
		s.renderStatus(w, r, status, loginView("/admin", "The form could not be read."))
		return
	}
	s.tryLogin(w, r, safeNext(r.PostForm.Get("next")), r.PostForm.Get("token"))
}

// tryLogin exchanges a right token for a session. A client throttled for
// failed attempts gets 429 with Retry-After, its token unchecked.
func (s *Server) tryLogin(w http.ResponseWriter, r *http.Request, next, token string) {
	switch v, wait := s.auth.checkToken(r, surfaceLogin, token); v {
	case authlimit.Throttled:
		secs := httpjson.SetRetryAfter(w, wait)
		s.renderStatus(w, r, http.StatusTooManyRequests, loginView(next,
			fmt.Sprintf("Too many failed attempts from your address. Try again in %d s.", secs)))
	case authlimit.Refused:
		s.renderStatus(w, r, http.StatusUnauthorized, loginView(next, "That token is not valid."))
	default:
		if err := s.auth.newSession(r.Context(), w, r); err != nil {
			s.loginFailed(w, r, next, err)
			return
		}
		http.Redirect(w, r, next, http.StatusSeeOther)
	}
}

// loginFailed logs a failure of the session store and says so on the login page.
func (s *Server) loginFailed(w http.ResponseWriter, r *http.Request, next string, err error) {
	s.log.ErrorContext(r.Context(), "console session failed", slog.Any("err", err))
	s.renderStatus(w, r, http.StatusServiceUnavailable, loginView(next, "The session could not be checked or stored; try again."))
}

// logout revokes the session server-side: the cookie opens nothing after it,
// wherever a copy of it is.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if err := s.auth.endSession(r.Context(), w, r); err != nil {
		s.log.ErrorContext(r.Context(), "console logout failed", slog.Any("err", err))
		s.problem(w, r, http.StatusServiceUnavailable, "", "The session could not be ended; try logging out again.")
		return
	}
	http.Redirect(w, r, "/admin/login", http.StatusSeeOther)
}
