package cli

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/syncgo/syncgo/internal/config"
)

// tracingOn reports whether the settings or the standard OTLP environment
// variables ask for traces (config.Tracing), and OTEL_SDK_DISABLED does not
// forbid them.
func tracingOn(c config.Tracing, getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	return c.Endpoint != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// tracesURL is the endpoint setting as the exporter's URL: /v1/traces
// when it names no path.
func tracesURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", err
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// newTracerProvider returns the trace pipeline of the settings: spans
// batched and exported over OTLP/HTTP, sampled by SampleRatio unless the
// caller's traceparent decided; nil when tracing is off.
func newTracerProvider(ctx context.Context, c config.Tracing, getenv func(string) string) (*sdktrace.TracerProvider, error) {
	if !tracingOn(c, getenv) {
		return nil, nil
	}
	var opts []otlptracehttp.Option
	if c.Endpoint != "" {
		u, err := tracesURL(c.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("tracing.endpoint: %w", err)
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	name := c.ServiceName
	if name == "" {
		name = getenv("OTEL_SERVICE_NAME")
	}
	if name == "" {
		name = "syncgo"
	}
	res := resource.NewSchemaless(attribute.String("service.name", name), attribute.String("service.version", binaryVersion()))
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))),
	), nil
}

// shutdownTracing exports the spans still batched, waiting at most 5 s.
func shutdownTracing(tp *sdktrace.TracerProvider) error {
	if tp == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return tp.Shutdown(ctx)
}
