package telemetry

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
)

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`)

// Resolve reads cordon's environment (OTEL_*) and the configuration's
// section. Whatever they hold, it never panics, and what it accepts is
// something the exporter can use as is: an http(s) URL without
// credentials, query or fragment, and headers net/http will send — a
// header it would refuse at each export (a name that is not a token, a
// value with a control character) is a usage error at start, not a
// silent loss of every span. An error never quotes the URL's password.
func FuzzResolve(f *testing.F) {
	f.Add("http://127.0.0.1:4318", "a=b,c=d%20e", "")
	f.Add("http://user:SECRETPW@h:1", "", "")
	f.Add("https://c.example/otlp", "authorization=Bearer%20x", "x-tenant")
	f.Add("http://h:1", "k=%00", "")
	f.Add("http://h:1", "bad name=v", "")
	f.Add("http://h:1", "k=a%7Fb", "")
	f.Add("http://h:1/", "k=v", "x y")
	f.Fuzz(func(t *testing.T, endpoint, headers, fileHeader string) {
		env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_HEADERS": headers}
		file := Settings{}
		if fileHeader != "" {
			file.Headers = map[string]string{fileHeader: "v"}
		}
		s, err := Resolve(file, func(k string) string { return env[k] })
		if err != nil {
			if strings.Contains(err.Error(), "SECRETPW") {
				t.Fatalf("the error quotes the URL's password: %v", err)
			}
			return
		}
		if s.Endpoint == "" {
			return
		}
		u, perr := url.Parse(s.Endpoint)
		if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("accepted endpoint %q", s.Endpoint)
		}
		for k, v := range s.Headers {
			if !tokenRE.MatchString(k) {
				t.Fatalf("accepted header name %q", k)
			}
			for _, c := range []byte(v) {
				if (c < 0x20 && c != '\t') || c == 0x7f {
					t.Fatalf("accepted header %s with value %q", k, v)
				}
			}
		}
	})
}
