package linux

import (
	"math"
	"net"
	"os"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit"
)

func TestTCPBound(t *testing.T) {
	for _, c := range []struct{ limit, want int64 }{{64 << 20, 80 << 20}, {0, 0}, {math.MaxInt64 - 4096, math.MaxInt64}} {
		if got := tcpBound(c.limit); got != c.want {
			t.Errorf("tcpBound(%d) = %d, want %d", c.limit, got, c.want)
		}
	}
}

func TestParseProcNetTCP(t *testing.T) {
	const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A0B1 00000000:0000 0A 00000000:00000C00 00:00000000 00000000  1000        0 1161 1 0000000000000000 100 0 0 10 0
   1: 0100007F:89D9 0100007F:A0B1 01 00000000:00100000 00:00000000 00000000  1000        0 1162 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:A0B1 0100007F:89D9 01 00000400:00000000 00:00000000 00000000  1000        0 1163 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:89DA 0100007F:A0B1 06 00000000:00000000 03:0000138F 00000000     0        0 0 3 0000000000000000
   4: 0100007F:A0B1 0100007F:89DB 01 00000000:00000800 00:00000000 00000000  1000        0 0 1 0000000000000000 20 4 30 10 -1
   5: 0100007F:A0B1 0100007F:89DC 08 00000000:00000000 00:00000000 00000000  1000        0 0 1 0000000000000000 20 4 30 10 -1
   6: 0100007F:89DD 0100007F:A0B1 04 00000010:00000000 01:00000010 00000000  1000        0 0 1 0000000000000000 20 4 30 10 -1
`
	q, n, c, err := parseProcNetTCP([]byte(table))
	if err != nil {
		t.Fatal(err)
	}
	// The listener's 0xC00 is a connection count, not bytes; TIME_WAIT
	// is not a socket that holds memory. Waiting to be accepted: the
	// established and close-wait sockets no process holds (inode 0), not
	// the one a process closed (FIN_WAIT1, inode 0 too).
	if q != 0x100000+0x400+0x800+0x10 || n != 6 || c != 2 {
		t.Errorf("queued %d, sockets %d, waiting %d; want %d, 6 and 2", q, n, c, 0x100000+0x400+0x800+0x10)
	}
	for _, bad := range []string{"h\n 0: a b\n", "h\n 0: a b zz 0:0\n", "h\n 0: a b 01 00:zz\n", "h\n 0: a b 01 0000\n",
		"h\n 0: a b 01 0:0 t r u x\n", "h\n 0: a b 08 0:0 t r u x y z\n"} {
		if _, _, _, err := parseProcNetTCP([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// A racy read's wrapped tx_queue (write_seq - snd_una < 0) is not 3.5
	// GB queued; the real rx_queue beside it still counts.
	wrapped := " sl\n 0: 0100007F:89D9 0100007F:A0B1 01 D2921EB3:00000100 00:0 0 0 0 1162\n"
	if q, _, _, err := parseProcNetTCP([]byte(wrapped)); err != nil || q != 0x100 {
		t.Errorf("wrapped tx_queue: queued %d, %v; want 256", q, err)
	}
	if q, n, c, err := parseProcNetTCP([]byte(" sl local\n")); err != nil || q != 0 || n != 0 || c != 0 {
		t.Errorf("header only: %d %d %d %v", q, n, c, err)
	}
}

func TestParseSockstatInuse(t *testing.T) {
	v4 := []byte("sockets: used 7\nTCP: inuse 3 orphan 0 tw 2 alloc 4 mem 1\nUDP: inuse 0 mem 0\n")
	v6 := []byte("TCP6: inuse 5\nUDP6: inuse 0\n")
	for _, c := range []struct {
		b     []byte
		proto string
		want  int
		ok    bool
	}{
		{v4, "TCP:", 3, true},
		{v6, "TCP6:", 5, true},
		{v4, "TCP6:", 0, false},
		{[]byte("TCP: alloc 3\n"), "TCP:", 0, false},
		{[]byte("TCP: inuse -1\n"), "TCP:", 0, false},
		{[]byte("TCP: inuse x\n"), "TCP:", 0, false},
	} {
		got, err := parseSockstatInuse(c.b, c.proto)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseSockstatInuse(%q, %q) = %d, %v; want %d, ok %v", c.b, c.proto, got, err, c.want, c.ok)
		}
	}
}

func TestUnacceptedFromRmemMax(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"4194304\n", 8 << 20}, // twice SO_RCVBUF's ceiling
		{"212992\n", 6 << 20},  // the floor: tcp_rmem's maximum
		{"", 6 << 20},          // unreadable
		{"-5", 6 << 20},        // nonsense
		{"33554432", 64 << 20},
	} {
		if got := unacceptedFromRmemMax([]byte(c.in)); got != c.want {
			t.Errorf("unacceptedFromRmemMax(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// The accept-queue count of a real listener in this process's namespace:
// two connections never accepted are two waiting.
func TestListenDiagCountsWaiting(t *testing.T) {
	testkit.RequireRoot(t) // setns into a network namespace
	d, err := openListenDiag(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	before, lsBefore, err := d.waiting()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	// Other processes on the host open and close listeners meanwhile:
	// ask until ours shows, for a while.
	for i := 0; ; i++ {
		after, lsAfter, err := d.waiting()
		if err != nil {
			t.Fatal(err)
		}
		if after-before >= 2 && lsAfter > lsBefore-1 {
			return
		}
		if i == 50 {
			t.Fatalf("waiting() = %d connections, %d listeners; before the listener %d, %d: want 2 more waiting", after, lsAfter, before, lsBefore)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestParseListenDiagRefusesShortAnswers(t *testing.T) {
	for _, b := range [][]byte{{1, 2, 3}, make([]byte, 16)} {
		if _, _, _, err := parseListenDiag(b); err == nil {
			t.Errorf("parseListenDiag(%x) = nil error", b)
		}
	}
}
