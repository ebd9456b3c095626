package cli

import (
	"log/slog"

	"switchyard/alerts"
)

// wireAlerts wires the sampler of the counters the alert rules read, so the
// console's Overview shows the rules' conditions on this process's counters
// (docs/alerts/). Every process runs it, whatever its roles.
func wireAlerts(w wiring) (*alerts.Sampler, part) {
	s := alerts.NewSampler(alerts.SamplerOpts{Now: w.db.Now, Logger: w.log.With(slog.String("subsystem", "alerts"))})
	return s, part{workers: []worker{s}}
}
