package evidence

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// nsenterPath is util-linux's nsenter. /proc/sys/user shows the reader's
// user namespace, and a multithreaded Go process cannot join another user
// namespace (setns fails with EINVAL), so the trusted side reads the
// sandbox's values through a single-threaded host helper that joins only
// its user namespace (mount namespace and /proc stay the host's) and keeps
// its own credentials.
var nsenterPath = "/usr/bin/nsenter"

// userLimitsCheck reads /proc/sys/user/* as seen from the sandbox's user
// namespace and compares them with what the init was told to set.
func userLimitsCheck(pid int, want map[string]uint64) Check {
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names)
	var ws []string
	for _, n := range names {
		ws = append(ws, n+"="+strconv.FormatUint(want[n], 10))
	}
	c := Check{Name: "user_namespace_limits", Want: strings.Join(ws, " "),
		Source: fmt.Sprintf("%s --user=/proc/%d/ns/user: /proc/sys/user/*", nsenterPath, pid)}
	if len(names) == 0 {
		c.Got = "no limits requested"
		return c
	}
	args := []string{fmt.Sprintf("--user=/proc/%d/ns/user", pid), "--preserve-credentials", "--", "/bin/cat"}
	for _, n := range names {
		args = append(args, "/proc/sys/user/"+n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nsenterPath, args...)
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		c.Got = fmt.Sprint("unreadable: ", err)
		return c
	}
	vals := strings.Fields(string(out))
	if len(vals) != len(names) {
		c.Got = fmt.Sprintf("unreadable: %d values for %d files", len(vals), len(names))
		return c
	}
	var gs []string
	ok := true
	for i, n := range names {
		gs = append(gs, n+"="+vals[i])
		ok = ok && vals[i] == strconv.FormatUint(want[n], 10)
	}
	c.Got, c.OK = strings.Join(gs, " "), ok
	return c
}
