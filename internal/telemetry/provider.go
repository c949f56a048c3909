package telemetry

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Export bounds: export never holds up a crossing. Spans wait in a
// bounded queue (dropped, never blocking, when it is full) and go out in
// batches; one export, and the flush at a session's end, give up after
// ExportTimeout.
const (
	QueueSize     = 4096
	BatchSize     = 512
	BatchTimeout  = 2 * time.Second
	ExportTimeout = 2 * time.Second
	// MaxAttrLen caps every string attribute value (agent-chosen strings
	// such as model ids and tool names included).
	MaxAttrLen = 256
)

// Provider makes the tracers of the sessions of one cordon process (a
// run, or the daemon) and exports their spans when Settings say so.
// A nil *Provider is valid: its sessions make ids but export nothing.
type Provider struct {
	tp       *sdktrace.TracerProvider
	settings Settings
}

var errorHandlerOnce sync.Once

// New makes the Provider for s; the exporter dials nothing until the
// first batch. log gets export errors (never a header or a span).
func New(ctx context.Context, s Settings, version string, log *slog.Logger) (*Provider, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", clip(s.ServiceName, MaxAttrLen)),
		attribute.String("service.version", clip(version, MaxAttrLen)),
	)
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{
			AttributeValueLengthLimit: MaxAttrLen, AttributeCountLimit: 64, EventCountLimit: 32,
			LinkCountLimit: 8, AttributePerEventCountLimit: 16, AttributePerLinkCountLimit: 16,
		}),
	}
	if s.Enabled() {
		// client.go: no retry (a retry would hold the flush at a
		// session's end past its bound; a lost batch is a lost batch).
		c, err := newClient(s, os.Getenv)
		if err != nil {
			return nil, err
		}
		exp, err := otlptrace.New(ctx, c)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp,
			sdktrace.WithMaxQueueSize(QueueSize), sdktrace.WithMaxExportBatchSize(BatchSize),
			sdktrace.WithBatchTimeout(BatchTimeout), sdktrace.WithExportTimeout(ExportTimeout)))
		errorHandlerOnce.Do(func() {
			// The SDK's global error handler prints to stderr; the
			// trusted side's log gets them instead, at WARN.
			otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
				log.Warn("trace export failed; spans are dropped", "err", clip(err.Error(), 300))
			}))
		})
	}
	return &Provider{tp: sdktrace.NewTracerProvider(opts...), settings: s}, nil
}

// Settings are the provider's settings.
func (p *Provider) Settings() Settings {
	if p == nil {
		return Settings{}
	}
	return p.settings
}

func (p *Provider) tracer() trace.Tracer {
	if p == nil || p.tp == nil {
		return idOnly().Tracer(tracerName)
	}
	return p.tp.Tracer(tracerName)
}

// idOnly makes spans (and their ids) that go nowhere: the ids of a nil
// Provider's sessions, for the receipts. Made at first use, not at
// package init: every cordon process (the sandbox init is the same
// binary re-executed) would pay for it on its start path.
var idOnly = sync.OnceValue(func() *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
})

const tracerName = "github.com/cordon-project/cordon"

// Flush exports what is queued, giving up after ExportTimeout.
func (p *Provider) Flush(ctx context.Context) {
	if p == nil || !p.settings.Enabled() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ExportTimeout)
	defer cancel()
	_ = p.tp.ForceFlush(ctx)
}

// Shutdown flushes and stops the exporter, giving up after ExportTimeout.
func (p *Provider) Shutdown(ctx context.Context) {
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ExportTimeout)
	defer cancel()
	_ = p.tp.Shutdown(ctx)
}

// NewWithProcessor is a Provider whose spans go to sp (a test's
// recorder, an embedding's own pipeline) instead of an OTLP exporter.
func NewWithProcessor(sp sdktrace.SpanProcessor) *Provider {
	return &Provider{tp: sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(sp),
		sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{AttributeValueLengthLimit: MaxAttrLen, AttributeCountLimit: 64,
			EventCountLimit: 32, LinkCountLimit: 8, AttributePerEventCountLimit: 16, AttributePerLinkCountLimit: 16}))}
}
