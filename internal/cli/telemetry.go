package cli

import (
	"context"
	"log/slog"
	"os"

	"github.com/cordon-project/cordon/internal/launch"
	"github.com/cordon-project/cordon/internal/telemetry"
)

// newTelemetry is the trace provider of this cordon process: the
// configuration's telemetry.traces section (plan's, nil: none), else the
// OTEL_* variables of cordon's own environment; off when neither sets an
// endpoint. When export is on it says where, once, at INFO (never the
// headers).
func newTelemetry(ctx context.Context, plan *launch.Plan, log *slog.Logger) (*telemetry.Provider, error) {
	var file telemetry.Settings
	if plan != nil && plan.Config() != nil {
		t := plan.Config().Telemetry.Traces
		file = telemetry.Settings{Endpoint: t.Endpoint, Headers: t.Headers, ServiceName: t.ServiceName}
	}
	s, err := telemetry.Resolve(file, os.Getenv)
	if err != nil {
		return nil, err
	}
	if s.Enabled() {
		log.Info("exporting traces over OTLP/HTTP", "endpoint", s.Endpoint, "service", s.ServiceName, "headers", len(s.Headers))
	}
	return telemetry.New(ctx, s, Version, log)
}
