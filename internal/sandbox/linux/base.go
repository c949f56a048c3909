package linux

import (
	"fmt"
	"path"
	"strings"

	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
)

// The program's identity inside the sandbox. Not 0: some agents refuse
// some modes as root, and root inside would own the namespace.
const (
	sandboxUID  = 1000
	sandboxGID  = 1000
	sandboxHome = "/home/agent"
)

// baseDirs are the host directories of the usual /usr layout. Each becomes
// a read-only bind, or the same symlink when the host has merged /usr.
var baseDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcBinds are the only host /etc entries the synthesized /etc shows: the
// dynamic loader's cache and config, public CA certificates, and the
// alternatives symlinks that /usr/bin points through. Nothing else of the
// host's /etc (which may hold secrets or the custodian's own files).
var etcBinds = []string{"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ssl/certs", "/etc/ca-certificates", "/etc/alternatives"}

// refusedSources may never be bound in: they expose the host itself, its
// processes, devices, runtime sockets or cordon's own state.
var refusedSources = []string{"/", "/proc", "/sys", "/dev", "/run", "/var/run", "/boot"}

// refusedTargets may never be a bind target: the provider owns them.
var refusedTargets = []string{"/", "/proc", "/sys", "/dev", "/run", "/tmp", "/etc", "/usr", sandboxHome}

// defaultEnv is the program's environment before --env; the host's is
// never inherited.
var defaultEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=" + sandboxHome,
	"LANG=C.UTF-8",
	"TERM=xterm-256color",
	"USER=agent",
	"LOGNAME=agent",
}

// etcFiles synthesizes the sandbox's /etc.
func etcFiles(hostname string) map[string]string {
	return map[string]string{
		"passwd": fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nagent:x:%d:%d:cordon agent:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			sandboxUID, sandboxGID, sandboxHome),
		"group":         fmt.Sprintf("root:x:0:\nagent:x:%d:\nnogroup:x:65534:\n", sandboxGID),
		"hosts":         "127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t" + hostname + "\n",
		"hostname":      hostname + "\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\n",
		"resolv.conf":   "",
	}
}

// mergeEnv applies user K=V pairs over the defaults, last one winning.
func mergeEnv(user []string) []string {
	out := append([]string(nil), defaultEnv...)
	idx := map[string]int{}
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		idx[k] = i
	}
	for _, kv := range user {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// under reports whether p is dir or below it (both clean and absolute).
func under(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// hostBaseBinds returns the read-only base binds and merged-usr symlinks.
func hostBaseBinds(readlink func(string) (string, error), isDir func(string) bool) ([]sbinit.Bind, []sbinit.Symlink) {
	var binds []sbinit.Bind
	var links []sbinit.Symlink
	for _, d := range baseDirs {
		if t, err := readlink(d); err == nil {
			if !path.IsAbs(t) {
				links = append(links, sbinit.Symlink{Target: t, Path: d})
			}
			continue
		}
		if isDir(d) {
			binds = append(binds, sbinit.Bind{Source: d, Target: d, Optional: true})
		}
	}
	for _, e := range etcBinds {
		binds = append(binds, sbinit.Bind{Source: e, Target: e, Optional: true})
	}
	return binds, links
}
