package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Exporters OTEL_TRACES_EXPORTER may name.
const (
	ExporterNone    = "none"
	ExporterOTLP    = "otlp"
	ExporterConsole = "console"
)

// Options configure Setup.
type Options struct {
	// Getenv reads the OpenTelemetry environment variables (os.Getenv when
	// nil): OTEL_TRACES_EXPORTER (none, the default; otlp; console),
	// OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf, the only one built in),
	// OTEL_EXPORTER_OTLP_ENDPOINT and the rest of the OTLP exporter's
	// variables, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
	// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG. The OTLP exporter and
	// the SDK read theirs from the process environment themselves.
	Getenv func(string) string
	// RingSize is how many recent spans Ring keeps for the console (0: none).
	RingSize int
	// Console is where the console exporter writes (os.Stdout when nil).
	Console io.Writer
	// Version is the service.version resource attribute.
	Version string
}

// Tracing is the installed tracer provider.
type Tracing struct {
	provider *sdktrace.TracerProvider
	// Ring holds the most recent spans, nil when Options.RingSize is 0.
	Ring *Ring
	// Exporter is the exporter OTEL_TRACES_EXPORTER chose.
	Exporter string
}

// Setup builds the tracer provider the environment asks for and installs it.
// With no exporter and no ring it installs nothing and returns a Tracing
// whose Shutdown does nothing: spans then cost nothing.
func Setup(ctx context.Context, opts Options) (*Tracing, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	name := strings.TrimSpace(strings.ToLower(getenv("OTEL_TRACES_EXPORTER")))
	if name == "" {
		name = ExporterNone
	}
	var exporter sdktrace.SpanExporter
	switch name {
	case ExporterNone:
	case ExporterConsole:
		w := opts.Console
		if w == nil {
			w = os.Stdout
		}
		e, err := stdouttrace.New(stdouttrace.WithWriter(w))
		if err != nil {
			return nil, fmt.Errorf("telemetry: console exporter: %w", err)
		}
		exporter = e
	case ExporterOTLP:
		proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		if proto != "" && proto != "http/protobuf" {
			return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL %q: only http/protobuf is built in (a collector's port 4318)", proto)
		}
		e, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
		}
		exporter = e
	default:
		return nil, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER %q: want none, otlp or console", name)
	}
	t := &Tracing{Exporter: name}
	if exporter == nil && opts.RingSize <= 0 {
		return t, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("switchyard"), semconv.ServiceVersion(opts.Version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	popts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if exporter != nil {
		popts = append(popts, sdktrace.WithBatcher(exporter))
	}
	if opts.RingSize > 0 {
		t.Ring = NewRing(opts.RingSize)
		popts = append(popts, sdktrace.WithSpanProcessor(t.Ring))
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (the SDK reads it), by
	// default parent-based always-on.
	t.provider = sdktrace.NewTracerProvider(popts...)
	Install(t.provider)
	return t, nil
}

// Shutdown flushes the exporter and uninstalls the provider.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	Install(nil)
	return t.provider.Shutdown(ctx)
}
