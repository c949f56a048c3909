package evidence

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestInSituHostCountsAccepts: a connection that reached the host's
// listeners before the judge (as one from a sandbox without its network
// boundary would) fails the check; the control connection is counted.
func TestInSituHostCountsAccepts(t *testing.T) {
	for _, reach := range []bool{false, true} {
		h, err := OpenInSitu(false)
		if err != nil {
			t.Fatal(err)
		}
		if reach {
			for _, c := range []struct {
				family int
				sa     unix.Sockaddr
			}{{unix.AF_UNIX, &unix.SockaddrUnix{Name: "@" + h.Abstract}}, {unix.AF_INET, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: h.Port}}} {
				fd, err := unix.Socket(c.family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				if err := unix.Connect(fd, c.sa); err != nil {
					t.Fatal(err)
				}
				defer unix.Close(fd)
			}
		}
		for _, c := range h.acceptChecks() {
			want := c.Control || !reach
			if c.OK != want {
				t.Errorf("reached=%v: %s = %v (%s), want %v", reach, c.Name, c.OK, c.Got, want)
			}
			if !c.Control && reach && !strings.HasPrefix(c.Got, "1 ") {
				t.Errorf("reached=%v: %s got %q, want 1 connection counted", reach, c.Name, c.Got)
			}
		}
		h.Close()
	}
}
