package egress

import (
	"errors"
	"io"
)

// TLS limits for reading a ClientHello from an untrusted client.
const (
	recordHeaderLen   = 5
	maxRecordPayload  = 1 << 14               // RFC 8446 5.1: plaintext fragments are at most 2^14 bytes
	maxClientHelloLen = 1 << 16               // generous: real ClientHellos (with PQ key shares) are ~2 KiB
	maxHelloRead      = 2 * maxClientHelloLen // bytes read in all, headers of tiny records included
	recordHandshake   = 22
	typeClientHello   = 1
	extServerName     = 0
	nameTypeHostName  = 0
)

var (
	errNotHandshake = errors.New("not a TLS handshake record")
	errNotHello     = errors.New("first handshake message is not a ClientHello")
	errHelloSize    = errors.New("ClientHello too large")
	errHelloFormat  = errors.New("malformed ClientHello")
)

// readClientHello reads TLS records from r until it holds one complete
// ClientHello, reassembled across records if fragmented, and returns the
// bytes read (to forward verbatim) and the server_name host_name ("" when
// the extension is absent). It reads no byte past the record that
// completes the message and never more than maxHelloRead bytes; the
// caller bounds the time with a read deadline.
func readClientHello(r io.Reader) (raw []byte, sni string, err error) {
	raw = make([]byte, 0, 2048)
	var msg []byte // handshake bytes across records
	for {
		var hdr [recordHeaderLen]byte
		k, err := io.ReadFull(r, hdr[:])
		raw = append(raw, hdr[:k]...)
		if err != nil {
			return raw, "", err
		}
		n := int(hdr[3])<<8 | int(hdr[4])
		if hdr[0] != recordHandshake || hdr[1] != 3 || n == 0 {
			return raw, "", errNotHandshake
		}
		if n > maxRecordPayload || len(raw)+n > maxHelloRead {
			return raw, "", errHelloSize
		}
		start := len(raw)
		raw = append(raw, make([]byte, n)...)
		if k, err := io.ReadFull(r, raw[start:]); err != nil {
			return raw[:start+k], "", err
		}
		msg = append(msg, raw[start:]...)
		if len(msg) < 4 {
			continue
		}
		if msg[0] != typeClientHello {
			return raw, "", errNotHello
		}
		mlen := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
		if mlen > maxClientHelloLen {
			return raw, "", errHelloSize
		}
		if len(msg) >= 4+mlen {
			sni, err := parseClientHello(msg[4 : 4+mlen])
			return raw, sni, err
		}
	}
}

// parseClientHello parses a ClientHello body (after the 4-byte handshake
// header) just far enough to find server_name. A second server_name
// extension or a second host_name entry is an error (RFC 6066 3 allows
// one name per type; TLS forbids repeated extensions).
func parseClientHello(b []byte) (string, error) {
	p := helloParser{b: b}
	p.skip(2 + 32)      // legacy_version, random
	p.skip(int(p.u8())) // legacy_session_id
	cs := int(p.u16())  // cipher_suites
	if cs < 2 || cs%2 != 0 {
		return "", errHelloFormat
	}
	p.skip(cs)
	if cm := int(p.u8()); cm < 1 {
		return "", errHelloFormat
	} else {
		p.skip(cm)
	}
	if p.bad {
		return "", errHelloFormat
	}
	if len(p.b) == 0 {
		return "", nil // no extensions at all
	}
	if int(p.u16()) != len(p.b) || p.bad {
		return "", errHelloFormat
	}
	var sni string
	seen := false
	for len(p.b) > 0 {
		typ, n := p.u16(), int(p.u16())
		body := p.take(n)
		if p.bad {
			return "", errHelloFormat
		}
		if typ != extServerName {
			continue
		}
		if seen {
			return "", errHelloFormat
		}
		seen = true
		e := helloParser{b: body}
		if int(e.u16()) != len(e.b) || len(e.b) == 0 {
			return "", errHelloFormat
		}
		for len(e.b) > 0 && !e.bad {
			nt, name := e.u8(), e.take(int(e.u16()))
			if e.bad || len(name) == 0 {
				return "", errHelloFormat
			}
			if nt == nameTypeHostName {
				if sni != "" {
					return "", errHelloFormat
				}
				sni = string(name)
			}
		}
		if e.bad {
			return "", errHelloFormat
		}
	}
	return sni, nil
}

// helloParser reads big-endian fields; any overrun sets bad and yields zeros.
type helloParser struct {
	b   []byte
	bad bool
}

func (p *helloParser) take(n int) []byte {
	if p.bad || n > len(p.b) {
		p.bad = true
		return nil
	}
	v := p.b[:n]
	p.b = p.b[n:]
	return v
}

func (p *helloParser) skip(n int) { p.take(n) }

func (p *helloParser) u8() uint8 {
	if v := p.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (p *helloParser) u16() uint16 {
	if v := p.take(2); v != nil {
		return uint16(v[0])<<8 | uint16(v[1])
	}
	return 0
}
