package linux

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cordon-project/cordon/internal/failure"
)

// An engine's overlayfs root, read back from the host's mount table: the
// layers it stacks and the options that decide what its upper layer's
// contents mean (whiteouts, redirects, metacopy), so that cordon's own
// overlay of the same layers shows the same tree (overlay_linux.go).

// maxOverlayLayers is overlayfs's own limit on lower layers.
const maxOverlayLayers = 500

// overlayOpts are an engine overlay's layers and on-disk-format options.
type overlayOpts struct {
	Lower       []string    // topmost first, as overlayfs lists them
	Upper, Work string      // both or neither
	Values      [][2]string // options passed on as they are
	Flags       []string    // flag options passed on as they are
	ReadOnly    bool        // the superblock is read-only
}

// overlayValues are the value options passed on unchanged, with the
// values accepted. They shape how the upper layer is read and written, so
// cordon's overlay must use the engine's.
var overlayValues = map[string][]string{
	"redirect_dir": {"on", "follow", "nofollow", "off"},
	"uuid":         {"on", "off", "null", "auto"},
	"xino":         {"on", "off", "auto"},
	"metacopy":     {"on", "off"},
	"verity":       {"on", "off", "require"},
	// index=on makes an upper layer exclusive to one mount (the engine's
	// holds it); nfs_export=on needs the index.
	"index":      {"off"},
	"nfs_export": {"off"},
}

// overlayFlags are the flag options passed on unchanged.
var overlayFlags = []string{"userxattr", "volatile"}

func overlayRefusal(format string, args ...any) error {
	return failure.Failf(failure.KindUnsupported, "overlay root", format, args...)
}

// parseOverlayOptions reads the super options field of an overlayfs line
// of /proc/self/mountinfo. The kernel writes each option with
// seq_show_option: name and value octal-escaped (\ooo) for ", \t\n\\", so
// a raw comma always separates options. Anything not understood exactly
// is refused: a layer misread would give the sandbox another tree.
func parseOverlayOptions(super string) (overlayOpts, error) {
	var o overlayOpts
	seen := map[string]bool{}
	for i, raw := range strings.Split(super, ",") {
		name, value, hasValue := strings.Cut(raw, "=")
		name, err := unescapeOctal(name)
		if err != nil {
			return o, err
		}
		if value, err = unescapeOctal(value); err != nil {
			return o, err
		}
		if i == 0 && (name == "rw" || name == "ro") && !hasValue {
			o.ReadOnly = name == "ro"
			continue
		}
		if seen[name] {
			return o, overlayRefusal("option %q appears twice", name)
		}
		seen[name] = true
		if err := o.set(name, value, hasValue); err != nil {
			return o, err
		}
	}
	if len(o.Lower) == 0 {
		return o, overlayRefusal("no lowerdir= among the options")
	}
	if (o.Upper == "") != (o.Work == "") {
		return o, overlayRefusal("upperdir and workdir must come together")
	}
	return o, nil
}

func (o *overlayOpts) set(name, value string, hasValue bool) error {
	switch {
	case name == "lowerdir" && hasValue:
		lower, err := splitLowerdir(value)
		o.Lower = lower
		return err
	case (name == "upperdir" || name == "workdir") && hasValue:
		if err := layerPath(value); err != nil {
			return err
		}
		if name == "upperdir" {
			o.Upper = value
		} else {
			o.Work = value
		}
		return nil
	case name == "lowerdir+" || name == "datadir+":
		// Layers added one by one (the new mount API), possibly by
		// descriptor of a detached mount: the kernel shows them relative
		// to that mount, which names nothing in the host's tree.
		return overlayRefusal("%s: layers added with the new mount API cannot be read back from the mount table", name)
	case slices.Contains(overlayFlags, name) && !hasValue:
		o.Flags = append(o.Flags, name)
		return nil
	case overlayValues[name] != nil && hasValue:
		if !slices.Contains(overlayValues[name], value) {
			return overlayRefusal("%s=%s is not supported (accepted: %s)", name, value, strings.Join(overlayValues[name], ", "))
		}
		o.Values = append(o.Values, [2]string{name, value})
		return nil
	}
	return overlayRefusal("option %q is not understood", name)
}

// splitLowerdir splits overlayfs's legacy lowerdir list. overlayfs lets a
// backslash escape a colon there, and "::" starts data-only layers;
// cordon takes neither (fail closed: no engine here writes them).
func splitLowerdir(v string) ([]string, error) {
	if strings.Contains(v, `\`) {
		return nil, overlayRefusal("lowerdir %q: escaped characters in layer paths are not supported", v)
	}
	parts := strings.Split(v, ":")
	if len(parts) > maxOverlayLayers {
		return nil, overlayRefusal("%d lower layers: overlayfs takes at most %d", len(parts), maxOverlayLayers)
	}
	for _, p := range parts {
		if p == "" {
			return nil, overlayRefusal("lowerdir %q: an empty layer (data-only layers, \"::\") is not supported", v)
		}
		if err := layerPath(p); err != nil {
			return nil, err
		}
	}
	return parts, nil
}

// layerPath: absolute, clean, no backslash. Docker's overlay2 mounts an
// image of very many layers with paths relative to its data root (the
// mount options would not fit a page otherwise); the mount table does not
// say relative to what. overlayfs unescapes every layer path it is given
// (upperdir "u\b" is the directory ub) while the mount table shows the
// mounter's text: read literally, a backslash names another directory.
func layerPath(p string) error {
	if strings.Contains(p, `\`) {
		return overlayRefusal("layer %q: escaped characters in layer paths are not supported", p)
	}
	if !filepath.IsAbs(p) {
		return overlayRefusal("layer %q is relative (an engine mounted it from its own working directory, which the mount table does not record)", p)
	}
	if filepath.Clean(p) != p || p == "/" {
		return overlayRefusal("layer %q is not a clean absolute path below /", p)
	}
	return nil
}

// unescapeOctal undoes the kernel's seq_escape: \ooo is one byte; a
// backslash followed by anything else is refused.
func unescapeOctal(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", overlayRefusal("mount option %q: a backslash without three octal digits", s)
		}
		v := 0
		for _, c := range []byte(s[i+1 : i+4]) {
			if c < '0' || c > '7' {
				return "", overlayRefusal("mount option %q: a backslash without three octal digits", s)
			}
			v = v*8 + int(c-'0')
		}
		if v > 0xff {
			return "", overlayRefusal("mount option %q: escape out of range", s)
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), nil
}

// fsconfigOptions are the options cordon's overlay is made with besides
// its layers: the engine's, with index=off whatever it said (the engine's
// mount holds the upper layer too).
func (o overlayOpts) fsconfigOptions() (values [][2]string, flags []string) {
	for _, v := range o.Values {
		if v[0] != "index" {
			values = append(values, v)
		}
	}
	values = append(values, [2]string{"index", "off"})
	return values, slices.Clone(o.Flags)
}

func (o overlayOpts) String() string {
	return fmt.Sprintf("%d lower layer(s), upper %q", len(o.Lower), o.Upper)
}
