// Command otlp-print is a tiny OTLP/HTTP trace receiver for trying
// cordon's traces without a collector: it accepts POST /v1/traces
// (protobuf, as cordon's exporter sends) and prints one JSON line per
// span on stdout — name, trace id, span id, parent span id and
// attributes, with every character a terminal would act on or hide
// escaped (\uXXXX; the JSON decodes to the exact values: attribute
// values can be agent-chosen). It is independent of cordon (only the OTLP protobuf
// definitions) and listens on loopback only.
//
//	go run ./examples/otlp-print -listen 127.0.0.1:4318
package main

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

type line struct {
	Name    string         `json:"name"`
	Service string         `json:"service,omitempty"`
	TraceID string         `json:"trace_id"`
	SpanID  string         `json:"span_id"`
	Parent  string         `json:"parent_span_id,omitempty"`
	Attrs   map[string]any `json:"attributes,omitempty"`
	Events  []string       `json:"events,omitempty"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:4318", "address to listen on")
	flag.Parse()
	http.HandleFunc("/v1/traces", handler(os.Stdout))
	log.Printf("otlp-print: listening on http://%s/v1/traces", *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}

// handler decodes each export request and writes one line per span to
// out. Attribute values can be agent-chosen (a model id, a host, a state
// operation's name): every line is terminal-safe (printable).
func handler(out io.Writer) http.HandlerFunc {
	var mu sync.Mutex
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		var msg collectorpb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &msg)
		}
		if err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range msg.ResourceSpans {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					l := line{Name: sp.Name, Service: service, TraceID: hex.EncodeToString(sp.TraceId),
						SpanID: hex.EncodeToString(sp.SpanId), Parent: hex.EncodeToString(sp.ParentSpanId), Attrs: map[string]any{}}
					for _, kv := range sp.Attributes {
						l.Attrs[kv.Key] = value(kv.Value)
					}
					for _, ev := range sp.Events {
						l.Events = append(l.Events, ev.Name)
					}
					if j, err := json.Marshal(l); err == nil {
						_, _ = out.Write(append(safe(j), '\n'))
					}
				}
			}
		}
		mu.Unlock()
		resp, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}
}

// safe rewrites, in a line of JSON, every character a terminal may act
// on or hide that encoding/json leaves raw — C1 controls (an 8-bit CSI
// or OSC), DEL, bidirectional overrides and other format characters,
// line and paragraph separators — as a \uXXXX escape: the JSON decodes
// to the same values.
func safe(j []byte) []byte {
	var out []byte
	for i := 0; i < len(j); {
		r, n := utf8.DecodeRune(j[i:])
		if r == 0x7f || unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) || r == 0x2028 || r == 0x2029 {
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				out = fmt.Appendf(out, "\\u%04x\\u%04x", r1, r2)
			} else {
				out = fmt.Appendf(out, "\\u%04x", r)
			}
		} else {
			out = append(out, j[i:i+n]...)
		}
		i += n
	}
	return out
}

func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	}
	return v.String()
}
