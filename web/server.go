// Package web is Switchyard's HTTP front: the router and its middleware,
// admin authentication, health, readiness and metrics, and the admin console
// (templ + htmx, assets embedded so the binary works offline). Domain packages
// bring their own routes; web mounts them under the shared middleware.
package web

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"switchyard/adminsession"
	"switchyard/authlimit"
	"switchyard/httpjson"
	"switchyard/openapi"
	"switchyard/rollup"
	"switchyard/store"
	"switchyard/telemetry"
)

// DefaultBodyLimit caps request bodies unless Options.BodyLimit says otherwise.
const DefaultBodyLimit = 1 << 20

//go:embed static
var staticFS embed.FS

// RoutesFunc registers routes on a router.
type RoutesFunc func(r *mux.Router)

// Options configure New.
type Options struct {
	DB         *store.DB
	AdminToken string
	Logger     *slog.Logger
	// Traces are the recent spans the console's search shows with an item's
	// trace; nil when none are kept (--trace-ring 0).
	Traces *telemetry.Ring
	// AuthLimiter throttles failed attempts with the admin token (login and
	// Bearer). Pass the process's one limiter, so that every surface counts
	// a client's failures together; nil gets a limiter of this server's own.
	AuthLimiter *authlimit.Limiter
	// Sessions keeps the console's sessions; nil gets an adminsession.Store
	// on DB under AdminToken.
	Sessions sessionStore
	// BodyLimit caps every request body (default 1 MiB; 413 beyond).
	BodyLimit int64
	Version   string
	// Roles this process runs, shown in the console.
	Roles []string
	// Public routes are mounted on the root router and bring their own
	// authentication (the bot guard, webhook secrets).
	Public []RoutesFunc
	// Admin routes are mounted on the /admin/api subrouter, behind the admin
	// token and cross-origin protection.
	Admin []RoutesFunc
	// OpenAPI describes the Public and Admin routes; served, unguarded, at
	// GET /openapi.json when set.
	OpenAPI *openapi.Document
	// The console's domain objects. Each is optional: a page whose object is
	// nil says the subsystem is not wired in this process. cli/wire.go passes the
	// concrete types; the small interfaces sit next to the pages that use them.
	//
	// Queues is every queue and topic group (*queue.Admin).
	Queues queueOps
	// Outbox is the backend's bot outbox (*backend.Outbox).
	Outbox outboxOps
	// Funnel is the onboarding funnel's counts (*onboarding.Stats), read
	// from the database in any process.
	Funnel funnelOps
	// Onboarding is the onboarding bot (*onboarding.Bot): the funnel, user
	// timelines and its DMs; nil when the bot role is off.
	Onboarding onboardingOps
	// Referral is the referral context (*referral.Service).
	Referral referralOps
	// Chat is the chat platform's operator side (*omni.Admin).
	Chat chatOps
	// History are the domain objects the console's search asks what their
	// own tables know about a term (*backend.Outbox, *onboarding.Bot,
	// *referral.Service, *omni.Admin, *queue.Admin): each that this process
	// wires.
	History []historySource
	// Sandbox is the built-in fake Telegram (*sandbox.Sandbox); the Sandbox
	// page exists only when it is set. Its JSON API is mounted with Admin,
	// like every subsystem's routes.
	Sandbox sandboxOps
	// Demo is the traffic simulator's switch; nil hides it.
	Demo DemoTraffic
	// Retention is the retention runner (*retention.Runner): the database's
	// size and what each rule removed last, on the Overview; nil hides them.
	Retention retentionOps
	// AlertCounters is this process's counters over the alert rules'
	// windows (*alerts.Sampler), for the Overview's warnings on chat
	// deliveries, 429s and webhook 5xx; nil leaves those out.
	AlertCounters alertCounters
	// Rollups are the throughput series per minute (*rollup.Rollups) that
	// the Overview's charts read; nil reads the rollups with the wired
	// owners' counts, for a process that rolls up nothing itself.
	Rollups rollupReader
}

// Server is the HTTP handler of a Switchyard process.
type Server struct {
	opts    Options
	log     *slog.Logger
	auth    *auth
	handler http.Handler
	// routers are the root router and the admin API's, for Walk.
	routers []*mux.Router
	// counts counts each throughput series whose owner is wired; rollups
	// are the series per minute (Options.Rollups).
	counts  map[series]countFunc
	rollups rollupReader
	// lookups caches the referral link lookups of finished minutes, for
	// the G1 alert's hour.
	lookups lookupCache
}

// New builds the router and its middleware.
func New(opts Options) *Server {
	if opts.DB == nil {
		panic("web: nil DB")
	}
	if opts.AdminToken == "" {
		panic("web: empty admin token")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BodyLimit <= 0 {
		opts.BodyLimit = DefaultBodyLimit
	}
	if opts.AuthLimiter == nil {
		opts.AuthLimiter = authlimit.New(authlimit.Opts{Logger: opts.Logger})
	}
	if opts.Sessions == nil {
		opts.Sessions = adminsession.New(adminsession.Opts{DB: opts.DB, Token: opts.AdminToken})
	}
	s := &Server{opts: opts, log: opts.Logger, auth: newAuth(opts.Sessions, opts.AdminToken, opts.AuthLimiter)}
	s.counts = s.counters()
	if s.rollups = opts.Rollups; s.rollups == nil {
		s.rollups = rollup.New(rollup.Opts{DB: opts.DB, Sources: s.counts})
	}

	r := mux.NewRouter()
	r.Use(captureRoute)
	// mux answers "not found" for a console path that matches a route by
	// path alone when a later route of the console's subrouter does not
	// match at all (gorilla/mux 1.8.1), so the console's 404 looks for the
	// path's methods itself and answers 405 when it has some.
	methods := func(req *http.Request) []string { return allowedMethods(r, req) }
	r.NotFoundHandler = s.consoleOr(httpjson.NotFoundHandler, methods)
	r.MethodNotAllowedHandler = s.consoleOr(httpjson.MethodNotAllowed(methods), methods)

	r.Handle("/healthz", httpjson.HandlerFunc(s.healthz)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/readyz", httpjson.HandlerFunc(s.readyz)).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/metrics", s.metricsHandler()).Methods(http.MethodGet)
	static, _ := fs.Sub(staticFS, "static")
	r.PathPrefix("/static/").Handler(cacheStatic(http.StripPrefix("/static/", http.FileServerFS(static)))).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/", http.RedirectHandler("/admin", http.StatusSeeOther)).Methods(http.MethodGet)

	for _, mount := range opts.Public {
		mount(r)
	}
	if opts.OpenAPI != nil {
		r.Handle("/openapi.json", openapi.Handler(opts.OpenAPI)).Methods(http.MethodGet)
	}
	declareWebhookSeries(r)

	// Everything under /admin refuses cross-origin state changes.
	csrf := http.NewCrossOriginProtection()
	csrf.SetDenyHandler(httpjson.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		return httpjson.Errorf(http.StatusForbidden, "cross_origin", "cross-origin request refused")
	}))

	// The admin API has its own router behind the auth check, so that every
	// path under /admin/api — even one that matches no route — answers 401
	// to a caller without credentials.
	apiRoot := mux.NewRouter()
	apiRoot.Use(captureRoute)
	apiRoot.NotFoundHandler = httpjson.NotFoundHandler
	apiRoot.MethodNotAllowedHandler = httpjson.MethodNotAllowed(func(req *http.Request) []string { return allowedMethods(apiRoot, req) })
	api := apiRoot.PathPrefix("/admin/api").Subrouter()
	for _, mount := range opts.Admin {
		mount(api)
	}
	r.PathPrefix("/admin/api/").Handler(csrf.Handler(s.auth.requireAPI(apiRoot)))
	s.routers = []*mux.Router{r, apiRoot}

	admin := r.PathPrefix("/admin").Subrouter()
	admin.Use(csrf.Handler)
	admin.HandleFunc("/login", s.loginPage).Methods(http.MethodGet)
	admin.HandleFunc("/login", s.login).Methods(http.MethodPost)
	admin.HandleFunc("/logout", s.logout).Methods(http.MethodPost)
	console := admin.NewRoute().Subrouter()
	console.Use(s.auth.requireSession)
	s.consoleRoutes(console)

	var h http.Handler = r
	h = capBodies(opts.BodyLimit, h)
	h = securityHeaders(h)
	h = recoverPanics(h)
	h = observe(opts.Logger, h)
	s.handler = h
	return s
}

// consoleOr answers a console address (under /admin, not /admin/api) that
// no route takes with an HTML page in the layout, behind the session like
// every console page — a mistyped console URL is a page, not JSON — and any
// other address with api's JSON error. allowed lists the methods an address
// takes: none is a 404, some a 405 with them in its Allow header.
func (s *Server) consoleOr(api http.Handler, allowed func(*http.Request) []string) http.Handler {
	page := s.auth.requireSession(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		methods := allowed(r)
		if len(methods) == 0 {
			s.problem(w, r, http.StatusNotFound, "", "There is no console page at "+r.URL.Path+".")
			return
		}
		w.Header().Set("Allow", strings.Join(methods, ", "))
		s.problem(w, r, http.StatusMethodNotAllowed, "",
			"This address takes "+strings.Join(methods, " or ")+" requests, not "+r.Method+".")
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isConsolePath(r.URL.Path) {
			page.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// isConsolePath reports whether path is under the console (/admin) and not
// its API (/admin/api).
func isConsolePath(path string) bool {
	return (path == "/admin" || strings.HasPrefix(path, "/admin/")) &&
		path != "/admin/api" && !strings.HasPrefix(path, "/admin/api/")
}

// allowedMethods lists, sorted, the methods of router's routes whose path
// matches req: the Allow header of a 405. It walks the routes, so it costs
// only when a 405 is answered.
func allowedMethods(router *mux.Router, req *http.Request) []string {
	seen := map[string]bool{}
	_ = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		methods, err := route.GetMethods()
		if err != nil || route.GetHandler() == nil {
			return nil
		}
		for _, m := range methods {
			probe := req.Clone(req.Context())
			probe.Method = m
			var match mux.RouteMatch
			if route.Match(probe, &match) && match.MatchErr == nil {
				seen[m] = true
			}
		}
		return nil
	})
	return slices.Sorted(maps.Keys(seen))
}

// Walk visits every route the server answers — its own, the console's and
// every domain package's — with mux's walk function. The admin API's routes
// come from their own router, after the root router's.
func (s *Server) Walk(fn mux.WalkFunc) error {
	for _, r := range s.routers {
		if err := r.Walk(fn); err != nil {
			return err
		}
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func cacheStatic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz answers 200 when the database takes writes, its file is sound and
// its schema is current. It is cheap and safe to call from anyone as often as
// they like: store.DB.Ready caches its answer and never writes on behalf of a
// caller's context.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	st, err := s.opts.DB.Ready(ctx)
	if reason := notReady(st, err); reason != "" {
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			s.log.WarnContext(ctx, "not ready", slog.Any("err", err))
		}
		return httpjson.Unavailable("%s", reason)
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"status": "ready", "schemaVersion": st.Current})
	return nil
}
