package web

import (
	"bytes"
	"log/slog"
	"net/http"

	"github.com/a-h/templ"
	"github.com/gorilla/mux"
)

func (s *Server) consoleRoutes(r *mux.Router) {
	r.HandleFunc("", s.overview).Methods(http.MethodGet)
	r.HandleFunc("/", s.overview).Methods(http.MethodGet)
	r.HandleFunc("/queues", s.queues).Methods(http.MethodGet)
	r.HandleFunc("/queues/table", s.queuesTable).Methods(http.MethodGet)
}

// render writes a component with status 200.
func (s *Server) render(w http.ResponseWriter, r *http.Request, c templ.Component) {
	s.renderStatus(w, r, http.StatusOK, c)
}

// renderStatus renders into a buffer first, so a failing component becomes a
// clean 500 instead of half a page.
func (s *Server) renderStatus(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	var buf bytes.Buffer
	if err := c.Render(r.Context(), &buf); err != nil {
		s.log.ErrorContext(r.Context(), "render page", slog.String("path", r.URL.Path), slog.Any("err", err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

func (s *Server) queueRows(r *http.Request) []QueueRow {
	if s.opts.Queues == nil {
		return nil
	}
	rows, err := s.opts.Queues(r.Context())
	if err != nil {
		s.log.ErrorContext(r.Context(), "list queues", slog.Any("err", err))
	}
	return rows
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	m := overviewModel{
		Version:  s.opts.Version,
		Roles:    s.opts.Roles,
		Database: s.opts.DB.Path(),
		Queues:   s.queueRows(r),
	}
	if st, err := s.opts.DB.MigrationStatus(r.Context()); err == nil {
		m.SchemaVersion = st.Current
	}
	s.render(w, r, overviewPage(m))
}

func (s *Server) queues(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, queuesPage(s.queueRows(r)))
}

func (s *Server) queuesTable(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, queueTable(s.queueRows(r)))
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	// A one-click login link carries the token in the query (as Jupyter's does);
	// it is exchanged for a session cookie and dropped from the address bar.
	if tok := r.URL.Query().Get("token"); tok != "" {
		if s.auth.tokenOK(tok) {
			s.auth.newSession(w, r)
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
		s.renderStatus(w, r, http.StatusUnauthorized, loginView(next, "That token is not valid."))
		return
	}
	if s.auth.sessionOK(r) {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	s.render(w, r, loginView(next, ""))
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		s.renderStatus(w, r, http.StatusBadRequest, loginView("/admin", "The form could not be read."))
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	if !s.auth.tokenOK(r.PostForm.Get("token")) {
		s.renderStatus(w, r, http.StatusUnauthorized, loginView(next, "That token is not valid."))
		return
	}
	s.auth.newSession(w, r)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	s.auth.endSession(w, r)
	http.Redirect(w, r, "/admin/login", http.StatusSeeOther)
}
