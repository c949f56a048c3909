package probeops

import (
	"bytes"
	"testing"
)

// The ops that send requests refuse every URL that is not http on a
// loopback IP: under a provider that isolates nothing, a request must
// still never leave the host.
func TestLoopbackURL(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:80", "http://127.0.0.1:83/v1/state/a", "http://[::1]:81", "http://127.0.0.53:9"} {
		if _, err := loopbackURL(ok); err != nil {
			t.Errorf("loopbackURL(%q) = %v, want it accepted", ok, err)
		}
	}
	for _, bad := range []string{"", "/conformance/a", "http://allowed.test:80/", "http://localhost:80", "https://127.0.0.1:443",
		"http://192.0.2.1:80", "http://10.0.0.1", "http://[2001:db8::1]:80", "http://127.0.0.1.example.com/"} {
		if _, err := loopbackURL(bad); err == nil {
			t.Errorf("loopbackURL(%q) accepted, want refused", bad)
		}
	}
}

// DNSQuery is a well-formed query a resolver would parse: one question,
// the A record (IN) of the name, recursion desired.
func TestDNSQuery(t *testing.T) {
	want := []byte("\x43\x44\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" +
		"\x06cordon\x04ab12\x04test\x00" + "\x00\x01\x00\x01")
	if got := DNSQuery("cordon.ab12.test."); !bytes.Equal(got, want) {
		t.Errorf("DNSQuery = %q, want %q", got, want)
	}
}
