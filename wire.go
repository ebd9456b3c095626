package main

import (
	"log/slog"
	"net/http"

	"switchyard/store"
	"switchyard/web"
)

// app is a wired process: its HTTP handler and the workers its roles run.
type app struct {
	handler http.Handler
	workers []worker
}

// wire builds the subsystems this process runs and mounts their routes.
func wire(cfg *config, db *store.DB, sec secrets, log *slog.Logger) *app {
	a := &app{}
	a.handler = web.New(web.Options{
		DB:         db,
		AdminToken: sec.AdminToken,
		Logger:     log,
		BodyLimit:  cfg.BodyLimit,
		Version:    version(),
		Roles:      cfg.Roles,
	})
	return a
}
