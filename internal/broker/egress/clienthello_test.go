package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// realClientHello captures the first flight crypto/tls sends for sni.
func realClientHello(t testing.TB, sni string) []byte {
	t.Helper()
	c1, c2 := net.Pipe()
	defer c2.Close()
	go func() {
		defer c1.Close()
		c1.SetDeadline(time.Now().Add(5 * time.Second))
		tls.Client(c1, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	}()
	c2.SetDeadline(time.Now().Add(5 * time.Second))
	var hdr [5]byte
	if _, err := io.ReadFull(c2, hdr[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(c2, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr[:], body...)
}

// fragment splits one TLS record's payload into records of at most n bytes.
func fragment(rec []byte, n int) []byte {
	var out []byte
	for p := rec[5:]; len(p) > 0; {
		k := min(n, len(p))
		out = append(out, rec[0], rec[1], rec[2], byte(k>>8), byte(k))
		out = append(out, p[:k]...)
		p = p[k:]
	}
	return out
}

func TestReadClientHello(t *testing.T) {
	hello := realClientHello(t, "api.example.com")
	noSNI := realClientHello(t, "")
	tests := []struct {
		name    string
		in      []byte
		sni     string
		wantErr bool
	}{
		{"real", hello, "api.example.com", false},
		{"real with trailing data", append(append([]byte{}, hello...), "next"...), "api.example.com", false},
		{"fragmented", fragment(hello, 100), "api.example.com", false},
		{"fragmented tiny", fragment(hello, 1), "api.example.com", false},
		{"no sni", noSNI, "", false},
		{"truncated", hello[:len(hello)-10], "", true},
		{"empty", nil, "", true},
		{"http", []byte("GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n"), "", true},
		{"ssl2", []byte{0x80, 0x2e, 0x01, 0x03, 0x01}, "", true},
		{"oversized record", []byte{22, 3, 1, 0x40, 0x01}, "", true},
		{"oversized message", []byte{22, 3, 1, 0, 4, 1, 0x01, 0x00, 0x01}, "", true},
		{"server hello", []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}, "", true},
		{"zero length record", []byte{22, 3, 1, 0, 0}, "", true},
		{"endless tiny records", fragment(append([]byte{22, 3, 1, 0, 0, 1, 0, 0xff, 0xff}, make([]byte, 0xffff)...), 1), "", true},
	}
	for _, tt := range tests {
		raw, sni, err := readClientHello(bytes.NewReader(tt.in))
		if (err != nil) != tt.wantErr || sni != tt.sni {
			t.Errorf("%s: readClientHello = %q, %v, want %q, error %v", tt.name, sni, err, tt.sni, tt.wantErr)
		}
		if !bytes.HasPrefix(tt.in, raw) {
			t.Errorf("%s: raw is not a prefix of the input", tt.name)
		}
		if tt.name == "real with trailing data" && len(raw) != len(hello) {
			t.Errorf("%s: read %d bytes, want exactly the record (%d)", tt.name, len(raw), len(hello))
		}
	}
}

// helloWithSNI builds a minimal ClientHello body with the given raw
// extensions block.
func helloBody(ext []byte) []byte {
	b := make([]byte, 2+32)
	b = append(b, 0)                // session id
	b = append(b, 0, 2, 0x13, 0x01) // one cipher suite
	b = append(b, 1, 0)             // null compression
	b = append(b, byte(len(ext)>>8), byte(len(ext)))
	return append(b, ext...)
}

func sniExt(names ...string) []byte {
	var list []byte
	for _, n := range names {
		list = append(list, 0, byte(len(n)>>8), byte(len(n)))
		list = append(list, n...)
	}
	body := append([]byte{byte(len(list) >> 8), byte(len(list))}, list...)
	return append([]byte{0, 0, byte(len(body) >> 8), byte(len(body))}, body...)
}

func TestParseClientHello(t *testing.T) {
	other := []byte{0, 10, 0, 2, 0, 29} // supported_groups
	tests := []struct {
		name    string
		body    []byte
		sni     string
		wantErr bool
	}{
		{"one name", helloBody(sniExt("a.example")), "a.example", false},
		{"after other ext", helloBody(append(append([]byte{}, other...), sniExt("a.example")...)), "a.example", false},
		{"no extensions block", helloBody(nil)[:2+32+1+4+2], "", false},
		{"two host names", helloBody(sniExt("a.example", "b.example")), "", true},
		{"two sni extensions", helloBody(append(sniExt("a.example"), sniExt("a.example")...)), "", true},
		{"empty name", helloBody(sniExt("")), "", true},
		{"ext length lies", append(helloBody(sniExt("a.example")), 0), "", true},
		{"odd cipher suites", []byte{3, 3}, "", true},
	}
	for _, tt := range tests {
		sni, err := parseClientHello(tt.body)
		if (err != nil) != tt.wantErr || sni != tt.sni {
			t.Errorf("%s: parseClientHello = %q, %v, want %q, error %v", tt.name, sni, err, tt.sni, tt.wantErr)
		}
	}
}

// FuzzClientHello feeds arbitrary bytes to the ClientHello reader: it
// must never panic, never read past its bound, and return only bytes it
// was given.
func FuzzClientHello(f *testing.F) {
	f.Add(realClientHello(f, "api.example.com"))
	f.Add(fragment(realClientHello(f, "x.example.org"), 7))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, sni, err := readClientHello(bytes.NewReader(data))
		if !bytes.HasPrefix(data, raw) {
			t.Fatalf("raw is not a prefix of the input")
		}
		if len(raw) > maxHelloRead {
			t.Fatalf("read %d bytes, past the bound", len(raw))
		}
		if err == nil && sni != "" && !bytes.Contains(payloads(raw), []byte(sni)) {
			t.Fatalf("sni %q not in the input", sni)
		}
		if err != nil && sni != "" {
			t.Fatalf("error %v with sni %q", err, sni)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) && len(raw) != len(data) {
			t.Fatalf("unexpected EOF before the end of the input")
		}
		parseClientHello(data) // must not panic on any body either
	})
}

// payloads joins the payloads of the complete TLS records in raw.
func payloads(raw []byte) []byte {
	var out []byte
	for len(raw) >= 5 {
		n := int(raw[3])<<8 | int(raw[4])
		if len(raw) < 5+n {
			break
		}
		out = append(out, raw[5:5+n]...)
		raw = raw[5+n:]
	}
	return out
}
