package probes

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cordon-project/cordon/internal/conformance"
	"github.com/cordon-project/cordon/internal/conformance/fixture"
	"github.com/cordon-project/cordon/internal/sandbox/linux/cgroup"
)

// What a killed sandbox may leave on the host, read from /proc and
// /sys/fs/cgroup: the recovery probes' residue checks.

// hostProc is one process as the host's /proc shows it; start (field 22
// of stat) tells a reused pid apart.
type hostProc struct {
	pid   int
	start string
}

func readHostProc(pid int) (hostProc, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return hostProc{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return hostProc{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return hostProc{}, false
	}
	return hostProc{pid: pid, start: f[19]}, true
}

// alive says whether p still runs (the same process, not a reused pid).
func (p hostProc) alive() bool {
	q, ok := readHostProc(p.pid)
	return ok && q.start == p.start
}

// cgroupDirs lists the cgroup directories named name under cordon/ in
// every hierarchy (v1 controllers, the unified tree, pure v2).
func cgroupDirs(name string) []string {
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/cordon/" + name, "/sys/fs/cgroup/*/cordon/" + name} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// cgroupProcs is the union of the pids in the cgroup.procs of name.
func cgroupProcs(name string) []int {
	var out []int
	for _, d := range cgroupDirs(name) {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 && !slices.Contains(out, pid) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// nsHolders lists the processes whose namespace kind (net, mnt) is ns
// ("net:[4026532…]"), scanning the host's /proc.
func nsHolders(kind, ns string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind)); err == nil && l == ns {
			out = append(out, pid)
		}
	}
	return out
}

// mountsUnder lists the host's mount points at or under dir.
func mountsUnder(dir string) []string {
	// mountinfo names real paths (a TMPDIR may be a symlink).
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return []string{"mountinfo: " + err.Error()}
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) <= 4 {
			continue
		}
		if p := cgroup.UnescapeMountinfo(fs[4]); p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// gcReport is `cordon gc --json`.
type gcReport struct {
	Reclaimed []string `json:"reclaimed"`
	Live      []string `json:"live"`
}

func runGC(ctx context.Context, e *conformance.Env, st string) (gcReport, error) {
	r, err := e.Cordon(ctx, st, "gc", "--json")
	if err != nil {
		return gcReport{}, err
	}
	var rep gcReport
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &rep); r.Code != 0 || err != nil {
		return gcReport{}, fmt.Errorf("cordon gc --json: exit %d (%v): %s", r.Code, err, strings.TrimSpace(r.Stderr))
	}
	return rep, nil
}

// waitFor polls cond every 20ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// slowUpstream is an Anthropic Messages upstream whose streams send a
// delta every 100ms until released (or 30s): a crossing in flight for as
// long as a probe needs. It counts requests.
type slowUpstream struct {
	srv      *httptest.Server
	requests atomic.Int64
	started  chan struct{}
	release  chan struct{}
	released atomic.Bool
}

func newSlowUpstream(e *conformance.Env, key string) *slowUpstream {
	u := &slowUpstream{started: make(chan struct{}, 16), release: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.requests.Add(1)
		if r.URL.Path != "/v1/messages" || r.Header.Get("x-api-key") != key {
			http.Error(w, `{"type":"error"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fixture.SSE(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_slow", "type": "message", "role": "assistant",
			"model": "claude-probe-1", "content": []any{}, "stop_reason": nil, "usage": map[string]any{"input_tokens": 12, "output_tokens": 1}}})
		fixture.SSE(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		select {
		case u.started <- struct{}{}:
		default:
		}
		deadline := time.After(30 * time.Second)
	loop:
		for {
			select {
			case <-u.release:
				break loop
			case <-deadline:
				break loop
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
				fixture.SSE(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "tok "}})
			}
		}
		fixture.SSE(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
		fixture.SSE(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": 7}})
		fixture.SSE(w, "message_stop", map[string]any{"type": "message_stop"})
	}))
	e.Cleanup(func() {
		u.unblock()
		u.srv.Close()
	})
	return u
}

func (u *slowUpstream) unblock() {
	if u.released.CompareAndSwap(false, true) {
		close(u.release)
	}
}
