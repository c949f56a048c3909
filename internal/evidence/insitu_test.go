package evidence

import (
	"net/netip"
	"slices"
	"testing"
)

const udpTable = `   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  100: 0100007F:A3B1 0100007F:0009 01 00000000:00000000 00:00000000 00000000 100000        0 1234 2 0000000000000000 0
  101: 00000000:0044 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1235 2 0000000000000000 0
  102: 0A00000A:9C40 010200C0:0009 01 00000000:00000000 00:00000000 00000000 100000        0 1236 2 0000000000000000 0
`

func TestParseUDPRemotes(t *testing.T) {
	got, err := parseUDPRemotes([]byte(udpTable))
	want := []string{"127.0.0.1:9", "0.0.0.0:0", "192.0.2.1:9"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("parseUDPRemotes = %v, %v, want %v", got, err, want)
	}
	for _, bad := range []string{"h\n 1: x", "h\n 1: 0100007F:0009 0100007:0009", "h\n 1: a b ZZ00007F:0009", "h\n 1: a b 0100007F:10009"} {
		if got, err := parseUDPRemotes([]byte(bad)); err == nil {
			t.Errorf("parseUDPRemotes(%q) = %v, want an error", bad, got)
		}
	}
}

func FuzzParseUDPRemotes(f *testing.F) {
	f.Add([]byte(udpTable))
	f.Add([]byte("header only\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := parseUDPRemotes(b)
		if err != nil {
			return
		}
		for _, r := range rs {
			if _, err := netip.ParseAddrPort(r); err != nil {
				t.Fatalf("remote %q is not an address:port: %v", r, err)
			}
		}
	})
}

// TestApplyInSitu: a failed in-situ check, attempt or control, leaves its
// boundary unverified with the check among its facts, and admission
// falls accordingly; passing checks change nothing.
func TestApplyInSitu(t *testing.T) {
	all := func() map[string]Boundary {
		b := map[string]Boundary{}
		for _, n := range Boundaries() {
			b[n] = Boundary{Verified: true, Facts: []Check{{Name: "x", OK: true}}}
		}
		return b
	}
	b := all()
	ApplyInSitu(b, &InSitu{Checks: []Check{{Name: "w", Boundary: Filesystem, OK: true}, {Name: "c", Boundary: Network, OK: true, Control: true}}})
	if l, mode := Admit(b); mode != Verified {
		t.Fatalf("passing in-situ checks: Admit = %v %s, want VERIFIED", l, mode)
	}
	for _, c := range []Check{{Name: "w", Boundary: Filesystem}, {Name: "ctl", Boundary: Network, Control: true}} {
		b := all()
		ApplyInSitu(b, &InSitu{Checks: []Check{c}})
		if b[c.Boundary].Verified {
			t.Errorf("failed in-situ check %+v: boundary %s still verified", c, c.Boundary)
		}
		facts := b[c.Boundary].Facts
		if last := facts[len(facts)-1]; last.Name != "in_situ:"+c.Name || last.OK {
			t.Errorf("failed in-situ check %+v: last fact %+v, want in_situ:%s not OK", c, last, c.Name)
		}
		if _, mode := Admit(b); mode != Unverified {
			t.Errorf("failed in-situ check %+v: mode %s, want UNVERIFIED", c, mode)
		}
	}
	ApplyInSitu(b, nil) // no set: nothing to apply
}
