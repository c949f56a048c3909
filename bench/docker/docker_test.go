package docker

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/testkit/engines"
)

const image = "cordon-bench/debian:bookworm"

// wrapper times one runtime invocation: it appends "START END ARGS" (ns)
// to LOG and exits with the runtime's status. It is registered as a
// runtime of its own, so the untimed runs pay nothing for it.
const wrapper = `#!/bin/sh
s=$(date +%%s%%N)
%q "$@"
rc=$?
e=$(date +%%s%%N)
echo "$s $e $*" >>%q
exit $rc
`

// TestDockerBench measures, with N runs of each interleaved:
//   - total: `docker run --rm --network none IMAGE /bin/true` per runtime;
//   - runtime: the time inside the runtime binary for one such run (the
//     sum of its invocations' wall times), through the timing wrapper.
//
// It prints medians and p90 and the ratio
// (cordon total − runc total) / runc runtime, target ≤ 1.5.
func TestDockerBench(t *testing.T) {
	if os.Getenv("CORDON_BENCH_DOCKER") != "1" {
		t.Skip("a benchmark: run bench/docker.sh")
	}
	n, _ := strconv.Atoi(os.Getenv("CORDON_BENCH_N"))
	if n < 1 {
		n = 20
	}
	cordon := os.Getenv("CORDON_BENCH_CORDON_OCI") // empty: runc only (proves the bench)
	dir := t.TempDir()
	rts := map[string]string{"runc-timed": timed(t, dir, "runc", "/usr/sbin/runc")}
	names := []string{"runc"}
	if cordon != "" {
		rts["cordon"] = cordon
		rts["cordon-timed"] = timed(t, dir, "cordon", cordon)
		names = append(names, "cordon")
	}
	d := engines.Dockerd(t, rts)
	d.Import(t, engines.Image(t), image)
	run := func(rt string) time.Duration {
		start := time.Now()
		d.Must(t, "run", "--rm", "--runtime", rt, "--network", "none", image, "/bin/true")
		return time.Since(start)
	}
	for _, rt := range names { // warm: image layers, page cache, caches
		run(rt)
		run(rt + "-timed")
	}
	total, inside := map[string][]time.Duration{}, map[string][]time.Duration{}
	perCall := map[string][]time.Duration{} // "runtime subcommand"
	for i := 0; i < n; i++ {
		for _, rt := range names {
			total[rt] = append(total[rt], run(rt))
		}
		for _, rt := range names {
			log := filepath.Join(dir, rt+".log")
			os.Remove(log)
			run(rt + "-timed")
			sum, calls := sumLog(t, log)
			inside[rt] = append(inside[rt], sum)
			for c, d := range calls {
				perCall[rt+" "+c] = append(perCall[rt+" "+c], d)
			}
		}
	}
	fmt.Printf("docker run --rm --network none IMAGE /bin/true, %d runs each, interleaved\n\n", n)
	fmt.Println("| runtime | total median ms | total p90 ms | in the runtime median ms | in the runtime p90 ms |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, rt := range names {
		fmt.Printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", rt, ms(q(total[rt], .5)), ms(q(total[rt], .9)), ms(q(inside[rt], .5)), ms(q(inside[rt], .9)))
	}
	fmt.Println("\nper call (median ms, runs that made it):")
	keys := make([]string, 0, len(perCall))
	for k := range perCall {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("  %-20s %7.1f  (%d)\n", k, ms(q(perCall[k], .5)), len(perCall[k]))
	}
	if cordon != "" {
		added := q(total["cordon"], .5) - q(total["runc"], .5)
		fmt.Printf("\ncordon's added time over runc (medians): %.1f ms; runc's own runtime time %.1f ms; ratio %.2f (target <= 1.5)\n",
			ms(added), ms(q(inside["runc"], .5)), float64(added)/float64(q(inside["runc"], .5)))
	}
}

// timed writes the timing wrapper of a runtime and returns its path.
func timed(t *testing.T, dir, name, real string) string {
	p := filepath.Join(dir, name+"-timed")
	if err := os.WriteFile(p, []byte(fmt.Sprintf(wrapper, real, filepath.Join(dir, name+".log"))), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// subcommands are the runtime calls an engine makes.
var subcommands = []string{"create", "start", "state", "kill", "delete", "exec", "features"}

// sumLog adds up the wall time of every invocation the wrapper logged, in
// all and per subcommand.
func sumLog(t *testing.T, log string) (time.Duration, map[string]time.Duration) {
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var sum time.Duration
	calls := map[string]time.Duration{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			t.Fatalf("wrapper log line %q", l)
		}
		s, err1 := strconv.ParseInt(f[0], 10, 64)
		e, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("wrapper log line %q", l)
		}
		sum += time.Duration(e - s)
		for _, a := range f[2:] {
			if slices.Contains(subcommands, a) {
				calls[a] += time.Duration(e - s)
				break
			}
		}
	}
	return sum, calls
}

func q(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := p * float64(len(s)-1)
	f := int(k)
	c := min(f+1, len(s)-1)
	return s[f] + time.Duration(float64(s[c]-s[f])*(k-float64(f)))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
