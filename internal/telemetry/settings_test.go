package telemetry

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name string
		file Settings
		env  map[string]string
		want Settings
		err  string
	}{
		{name: "off by default", want: Settings{ServiceName: "cordon"}},
		{name: "base endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
			want: Settings{Endpoint: "http://127.0.0.1:4318/v1/traces", ServiceName: "cordon", Headers: map[string]string{}}},
		{name: "traces endpoint as is", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c.example/otlp/t",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored:4318"},
			want: Settings{Endpoint: "https://c.example/otlp/t", ServiceName: "cordon", Headers: map[string]string{}}},
		{name: "file wins over env", file: Settings{Endpoint: "http://file:4318/", ServiceName: "svc", Headers: map[string]string{"a": "file"}},
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318", "OTEL_SERVICE_NAME": "envsvc",
				"OTEL_EXPORTER_OTLP_HEADERS": "a=env,b=x%20y", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "c=3"},
			want: Settings{Endpoint: "http://file:4318/v1/traces", ServiceName: "svc", Headers: map[string]string{"a": "file", "b": "x y", "c": "3"}}},
		{name: "none switches the file off", file: Settings{Endpoint: "http://file:4318"}, env: map[string]string{"OTEL_TRACES_EXPORTER": "none"},
			want: Settings{ServiceName: "cordon"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://e:1"},
			want: Settings{ServiceName: "cordon"}},
		{name: "otlp alone: the default endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"},
			want: Settings{Endpoint: "http://localhost:4318/v1/traces", ServiceName: "cordon", Headers: map[string]string{}}},
		{name: "service name from env", env: map[string]string{"OTEL_SERVICE_NAME": "x"}, want: Settings{ServiceName: "x"}},
		{name: "other exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "only over otlp"},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://e:1"}, err: "http/protobuf"},
		{name: "credentials in the URL", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://user:sekrit@e:1"}, err: "without credentials"},
		{name: "not http", file: Settings{Endpoint: "file:///etc/passwd"}, err: "http(s)"},
		{name: "bad header", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://e:1", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, err: "key=value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.file, func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Resolve = %+v, %v; want an error with %q", got, err, tc.err)
				}
				if strings.Contains(err.Error(), "sekrit") {
					t.Fatalf("the error quotes the URL's credentials: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Resolve (-want +got):\n%s", d)
			}
		})
	}
}

func TestReasonClass(t *testing.T) {
	for in, want := range map[string]string{
		"":                               "",
		"host-not-allowed: no rule":      "host-not-allowed",
		"route claude":                   "route",
		"Policy-Denied by forbid":        "policy-denied",
		"sk-ant-real-key-7f3a trailing":  "other", // a broker's free text is never exported
		"gateway_lost: the gateway died": "gateway_lost",
		strings.Repeat("a", 100) + " x":  "other",
	} {
		if got := ReasonClass(in); got != want {
			t.Errorf("ReasonClass(%q) = %q, want %q", in, got, want)
		}
	}
}
