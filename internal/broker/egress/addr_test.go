package egress

import (
	"net"
	"net/netip"
	"testing"

	"github.com/cordon-project/cordon/internal/testkit"
)

func TestAddrPolicy(t *testing.T) {
	p, err := newAddrPolicy(nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr string
		want bool
	}{
		{"93.184.216.34", true},
		{"1.1.1.1", true},
		{"2606:4700:4700::1111", true},
		{"64:ff9b::5db8:d822", true}, // NAT64 of 93.184.216.34
		{"2002:5db8:d822::1", true},  // 6to4 of 93.184.216.34
		{"::ffff:93.184.216.34", true},

		{"127.0.0.1", false},
		{"127.255.255.254", false},
		{"0.0.0.0", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"192.168.1.1", false},
		{"100.64.0.1", false},
		{"169.254.169.254", false},
		{"192.0.0.170", false},
		{"192.0.2.1", false},
		{"198.51.100.1", false},
		{"203.0.113.1", false},
		{"198.18.0.1", false},
		{"224.0.0.1", false},
		{"240.0.0.1", false},
		{"255.255.255.255", false},
		{"::", false},
		{"::1", false},
		{"::7f00:1", false}, // IPv4-compatible
		{"::ffff:127.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"::ffff:0:7f00:1", false}, // SIIT
		{"64:ff9b::7f00:1", false},
		{"64:ff9b::a9fe:a9fe", false},
		{"64:ff9b:1::5db8:d822", false}, // local-use NAT64
		{"2002:7f00:1::", false},
		{"2002:a00:1::1", false},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", false}, // Teredo
		{"2001:db8::1", false},
		{"3fff::1", false},
		{"fc00::1", false},
		{"fd12:3456::1", false},
		{"fe80::1", false},
		{"fec0::1", false},
		{"ff02::1", false},
		{"100::1", false},
	}
	for _, tt := range tests {
		_, got := p.check(netip.MustParseAddr(tt.addr))
		if got != tt.want {
			t.Errorf("check(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
	if _, ok := p.check(netip.MustParseAddr("2606:4700:4700::1111%eth0")); ok {
		t.Errorf("check(zoned) = true, want false")
	}
	if a, _ := p.check(netip.MustParseAddr("::ffff:93.184.216.34")); a != netip.MustParseAddr("93.184.216.34") {
		t.Errorf("check(::ffff:93.184.216.34) dials %v, want 93.184.216.34", a)
	}
}

func TestAddrPolicyUnsafe(t *testing.T) {
	p, err := newAddrPolicy([]netip.Prefix{loopback, netip.MustParsePrefix("::ffff:10.0.0.0/104")})
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{
		"127.0.0.1":        true,
		"::ffff:127.0.0.1": true, // judged unmapped
		"127.0.0.2":        false,
		"10.9.9.9":         true, // mapped prefix unmapped to 10/8
		"::1":              false,
	} {
		if _, got := p.check(netip.MustParseAddr(addr)); got != want {
			t.Errorf("unsafe check(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestAddrPolicyOwnAddresses(t *testing.T) {
	p, err := newAddrPolicy(nil)
	if err != nil {
		t.Fatal(err)
	}
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		testkit.Unavailable(t, "no interface addresses: %v", err)
	}
	for _, ia := range ifs {
		ipn, ok := ia.(*net.IPNet)
		if !ok {
			continue
		}
		a, _ := netip.AddrFromSlice(ipn.IP)
		if _, ok := p.check(a); ok {
			t.Errorf("check(own address %v) = true, want false", a)
		}
	}
}
