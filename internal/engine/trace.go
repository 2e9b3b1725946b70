package engine

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the engine's spans.
const tracerName = "github.com/syncgo/syncgo/internal/engine"

// childSpan starts the span name under the span of ctx, with the
// attribute key = n, when that one is recording (the server traces the
// request, syncgo.Config.TracerProvider); otherwise it returns ctx and
// nil, at no cost: nothing is built or allocated before the check.
func childSpan(ctx context.Context, name string, key attribute.Key, n int) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, nil
	}
	return parent.TracerProvider().Tracer(tracerName).Start(ctx, name, trace.WithAttributes(key.Int(n)))
}

// endSpan ends a span of childSpan (nil: none), an error when err is.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
