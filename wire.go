package main

import (
	"log/slog"
	"net/http"

	"switchyard/bot"
	"switchyard/store"
	"switchyard/web"
)

// app is a wired process: its HTTP handler, the workers its roles run, and
// what must happen when the HTTP server starts shutting down.
type app struct {
	handler    http.Handler
	workers    []worker
	onShutdown []func()
}

// wire builds the subsystems this process runs and mounts their routes.
func wire(cfg *config, db *store.DB, sec secrets, log *slog.Logger) *app {
	a := &app{}
	wo := web.Options{
		DB:         db,
		AdminToken: sec.AdminToken,
		Logger:     log,
		BodyLimit:  cfg.BodyLimit,
		Version:    version(),
		Roles:      cfg.Roles,
	}

	backend := bot.NewBackend(bot.BackendOpts{
		DB:     db,
		Secret: sec.BotToBackend,
		Logger: log.With(slog.String("subsystem", "bot-backend")),
	})
	// Operators can always act on the backend domain; the /bot/* contract is
	// served by processes that run the backend role.
	wo.Admin = append(wo.Admin, backend.AdminRoutes)
	if cfg.has("backend") {
		wo.Public = append(wo.Public, backend.Routes)
		a.onShutdown = append(a.onShutdown, backend.Shutdown)
	}

	a.handler = web.New(wo)
	return a
}
