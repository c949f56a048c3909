package denial

import (
	"log/slog"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/textsafe"
)

// Log writes the host's one line for a recorded denial, whichever broker
// denied: the receipt id (0 when the store gave none), the broker, the
// target and the rule, every string escaped (the target and reason may
// be the agent's bytes). At WARN, so a run's log at its default level
// shows it. An allow is not logged here.
func Log(log *slog.Logger, id int64, rc crossing.Receipt) {
	if log == nil || rc.Decision == crossing.Allow {
		return
	}
	log.Warn("crossing denied",
		slog.Int64("receipt", id),
		slog.String("workload", textsafe.Line(rc.Identity.Workload)),
		slog.String("sandbox_id", textsafe.Line(rc.Identity.SandboxID)),
		slog.String("broker", textsafe.Line(rc.Broker)),
		slog.String("decision", textsafe.Line(rc.Decision)),
		slog.String("action", textsafe.Line(rc.Action)),
		slog.String("target", textsafe.Line(rc.Target)),
		slog.String("rule", textsafe.Line(rc.Rule)),
		slog.String("reason", textsafe.Line(rc.Reason)))
}
