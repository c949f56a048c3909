package linux

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/evidence"
	"github.com/cordon-project/cordon/internal/sandbox"
	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
)

// TestImageRootUIDOtherGID: an image's uid 0 with another gid (user
// "0:5") is its namespace's root as much as "0:0": the owner of the
// init's /proc/PID/mem (the namespace root) is its uid, so the owner
// check cannot tell and the init's /proc/1/mem probe must judge
// init_non_dumpable. It was judged by the owner and failed, so such an
// image was never admitted (review finding). A non-zero uid with gid 0
// keeps the owner check. The program's ids are read from the host.
func TestImageRootUIDOtherGID(t *testing.T) {
	p := newImageProvider(t)
	for _, ids := range [][2]uint32{{0, 5}, {5, 0}} {
		t.Run(fmt.Sprintf("%d:%d", ids[0], ids[1]), func(t *testing.T) {
			root := imageRoot(t, "")
			sb, rec := startImageRecord(t, p, imageSpec(root, sandbox.Image{UID: ids[0], GID: ids[1]}, "exec /bin/busybox sleep 600"))
			var fact *evidence.Check
			for i, f := range rec.Boundaries[evidence.Process].Facts {
				if f.Name == "init_non_dumpable" {
					fact = &rec.Boundaries[evidence.Process].Facts[i]
				}
			}
			probe := strings.Contains(fmt.Sprint(fact), sbinit.MemProbeAttempt)
			if fact == nil || !fact.OK || probe != (ids[0] == 0) {
				t.Errorf("init_non_dumpable = %+v; want verified, by the probe exactly when the uid is 0", fact)
			}
			pid := programPid(t, sb, "sleep")
			l := sb.Lease()
			for field, want := range map[string]uint32{"Uid": l.UID + ids[0], "Gid": l.GID + ids[1]} {
				w := strconv.FormatUint(uint64(want), 10)
				if got := statusField(t, pid, field); got != strings.Join([]string{w, w, w, w}, " ") {
					t.Errorf("%s = %q, want all %s", field, got, w)
				}
			}
		})
	}
}
