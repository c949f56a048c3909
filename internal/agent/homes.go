package agent

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// hostHomes is HostHomes (tests replace it).
var hostHomes = HostHomes

// passwdFile lists the host's users (their home directories).
const passwdFile = "/etc/passwd"

// HostHomes are the host's home directories: /root, /home, and every
// home directory /etc/passwd names (except "/"). A missing or unreadable
// /etc/passwd leaves /root and /home.
func HostHomes() []string {
	homes := []string{"/root", "/home"}
	f, err := os.Open(passwdFile)
	if err != nil {
		return homes
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 7 {
			continue
		}
		if h := filepath.Clean(fields[5]); filepath.IsAbs(h) && h != "/" {
			homes = append(homes, h)
		}
	}
	return homes
}

// ExposesHome reports whether binding dir would show a home directory of
// homes: dir is "/", one of them, holds one, or sits directly in /home.
func ExposesHome(dir string, homes []string) bool {
	dir = filepath.Clean(dir)
	if dir == "/" || filepath.Dir(dir) == "/home" {
		return true
	}
	for _, h := range homes {
		if h == dir || strings.HasPrefix(h, dir+"/") {
			return true
		}
	}
	return false
}
