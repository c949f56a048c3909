package telemetry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpClient posts spans to an OTLP/HTTP collector (binary protobuf,
// POST to Settings.Endpoint). The SDK's otlptrace exporter turns spans
// into OTLP ResourceSpans; this client only sends them. It is not the Go
// project's otlptracehttp because that one links the collector's
// service package, and with it gRPC, grpc-gateway and expvar, whose
// package initialisation every start of the cordon binary paid (the
// sandbox init is the same binary re-executed: bench/RESULTS.md, issue
// 12). The request body is a TracesData message, which is on the wire
// exactly the ExportTraceServiceRequest the collector expects (both are
// `repeated ResourceSpans resource_spans = 1`).
//
// No retry (a flush is bounded), no redirect (a token is never carried
// to a second host), an error never quotes the endpoint, and the answer
// is read to at most 64 KiB.
type otlpClient struct {
	endpoint string
	headers  map[string]string
	http     *http.Client
}

// newClient is the client for s. A CA bundle for an https collector
// comes from OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE or
// OTEL_EXPORTER_OTLP_CERTIFICATE (a PEM file), as the OpenTelemetry
// specification names them; otherwise the host's roots.
func newClient(s Settings, getenv func(string) string) (*otlpClient, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the collector is the operator's; no proxy variable redirects it
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"} {
		p := getenv(v)
		if p == "" {
			continue
		}
		pem, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate in the file", v)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		break
	}
	return &otlpClient{
		endpoint: s.Endpoint,
		headers:  s.Headers,
		http: &http.Client{
			Transport: tr,
			Timeout:   ExportTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return errors.New("the collector redirected; not followed")
			},
		},
	}, nil
}

var _ otlptrace.Client = (*otlpClient)(nil)

func (c *otlpClient) Start(context.Context) error { return nil }

func (c *otlpClient) Stop(context.Context) error {
	c.http.CloseIdleConnections()
	return nil
}

// UploadTraces sends one batch.
func (c *otlpClient) UploadTraces(ctx context.Context, rs []*tracepb.ResourceSpans) error {
	body, err := proto.Marshal(&tracepb.TracesData{ResourceSpans: rs})
	if err != nil {
		return fmt.Errorf("trace export: encode: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return errors.New("trace export: the endpoint does not make a request")
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // *url.Error quotes the endpoint
		}
		return fmt.Errorf("trace export: %v", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("trace export: the collector answered %d", resp.StatusCode)
	}
	return nil
}
