// Package telemetrytest is an in-process OTLP/HTTP trace receiver for
// tests: it decodes what an exporter posts to /v1/traces and keeps the
// spans, and counts the connections it accepts.
//
// Plane: test-only. It must never be imported by the cordon binary.
package telemetrytest
