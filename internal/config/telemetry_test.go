package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTelemetry(t *testing.T) {
	c, err := Parse([]byte(head+"telemetry:\n  traces:\n    endpoint: http://127.0.0.1:4318\n    service_name: svc\n    headers: {x-tenant: acme}\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Telemetry{Traces: Traces{Endpoint: "http://127.0.0.1:4318", ServiceName: "svc", Headers: map[string]string{"x-tenant": "acme"}}}
	if d := cmp.Diff(want, c.Telemetry); d != "" {
		t.Fatalf("Telemetry (-want +got):\n%s", d)
	}
	if c, err := Parse([]byte(head), "c.yaml"); err != nil || c.Telemetry.Traces.Endpoint != "" {
		t.Fatalf("no section: %+v, %v; want export off", c.Telemetry, err)
	}
	for _, bad := range []string{
		"traces:\n    endpoint: ftp://x",
		"traces:\n    endpoint: http://user:tok-secret@x:4318",
		"traces:\n    endpoint: http://x:4318/?q=1",
		"traces:\n    headers: {\"bad name\": v}",
		"traces:\n    headers: {ok: \"a\\nb\"}",
		"traces:\n    unknown: 1",
		"metrics: {}",
	} {
		_, err := Parse([]byte(head+"telemetry:\n  "+bad+"\n"), "c.yaml")
		if err == nil || !strings.Contains(err.Error(), "telemetry") {
			t.Errorf("Parse(telemetry: %s) = %v, want an error naming telemetry", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "tok-secret") {
			t.Errorf("the error quotes the endpoint's credentials: %v", err)
		}
	}
}
