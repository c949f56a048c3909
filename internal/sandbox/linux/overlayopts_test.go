package linux

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-project/cordon/internal/failure"
)

// TestParseOverlayOptions reads the super options the kernel writes for
// engines' overlays, and refuses what it cannot read exactly.
func TestParseOverlayOptions(t *testing.T) {
	docker := `rw,lowerdir=/var/lib/docker/overlay2/l/ABC:/var/lib/docker/overlay2/l/DEF,upperdir=/var/lib/docker/overlay2/1f/diff,workdir=/var/lib/docker/overlay2/1f/work,index=off`
	o, err := parseOverlayOptions(docker)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Lower, []string{"/var/lib/docker/overlay2/l/ABC", "/var/lib/docker/overlay2/l/DEF"}) || o.Upper != "/var/lib/docker/overlay2/1f/diff" || o.Work != "/var/lib/docker/overlay2/1f/work" || o.ReadOnly {
		t.Fatalf("docker's options read as %+v", o)
	}
	values, _ := o.fsconfigOptions()
	if !slices.Contains(values, [2]string{"index", "off"}) {
		t.Errorf("fsconfig options %v lack index=off", values)
	}
	o, err = parseOverlayOptions(`ro,lowerdir=/a\040b:/c,redirect_dir=on,uuid=on,xino=off,userxattr,metacopy=off`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Lower, []string{"/a b", "/c"}) || !o.ReadOnly || !slices.Equal(o.Flags, []string{"userxattr"}) || len(o.Values) != 4 {
		t.Fatalf("read as %+v", o)
	}
	for _, tc := range []struct{ in, want string }{
		{`rw,upperdir=/u,workdir=/w`, "no lowerdir"},
		{`rw,lowerdir=/a,upperdir=/u`, "come together"},
		{`rw,lowerdir=l/ABC:l/DEF,upperdir=1f/diff,workdir=1f/work`, "relative"},
		{`rw,lowerdir=/a/../b`, "clean"},
		{`rw,lowerdir=/`, "clean"},
		{`rw,lowerdir=/a\134:b`, "escaped"},
		{`rw,lowerdir=/a::/b`, "data-only"},
		// overlayfs unescapes upperdir and workdir too ("u\b" is "ub"),
		// and the mount table shows what the mounter wrote.
		{`rw,lowerdir=/a,upperdir=/x/u\134b,workdir=/x/w`, "escaped characters"},
		{`rw,lowerdir=/a,upperdir=/x/u,workdir=/x/w\134\054k`, "escaped characters"},
		{`rw,lowerdir+=/,lowerdir+=/`, "new mount API"},
		{`rw,lowerdir=/a,datadir+=/d`, "new mount API"},
		{`rw,lowerdir=/a,index=on`, "index=on"},
		{`rw,lowerdir=/a,nfs_export=on`, "nfs_export=on"},
		{`rw,lowerdir=/a,default_permissions`, "not understood"},
		{`rw,lowerdir=/a,userxattr=1`, "not understood"},
		{`rw,lowerdir=/a,lowerdir=/b`, "twice"},
		{`rw,lowerdir=/a\04`, "octal"},
		{`rw,lowerdir=/a\9xx`, "octal"},
		{`rw,lowerdir=/a\777`, "range"},
		{`rw,lowerdir=` + strings.Repeat("/l:", 501) + "/l", "at most"},
	} {
		_, err := parseOverlayOptions(tc.in)
		if failure.KindOf(err) != failure.KindUnsupported || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseOverlayOptions(%.60q) = %v, want %s naming %q", tc.in, err, failure.KindUnsupported, tc.want)
		}
	}
}

// FuzzParseOverlayOptions: the parser never panics, and what it accepts
// names layers overlayfs and the host can only read one way.
func FuzzParseOverlayOptions(f *testing.F) {
	for _, s := range []string{
		`rw,lowerdir=/var/lib/docker/overlay2/l/ABC:/var/lib/docker/overlay2/l/DEF,upperdir=/var/lib/docker/overlay2/1f/diff,workdir=/var/lib/docker/overlay2/1f/work,index=off`,
		`ro,lowerdir=/a\040b:/c,redirect_dir=on,uuid=on,xino=off,userxattr`,
		`rw,lowerdir+=/,upperdir=/diff,workdir=/work`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		o, err := parseOverlayOptions(in)
		if err != nil {
			if failure.KindOf(err) != failure.KindUnsupported {
				t.Fatalf("error of kind %v: %v", failure.KindOf(err), err)
			}
			return
		}
		if len(o.Lower) == 0 || len(o.Lower) > maxOverlayLayers || (o.Upper == "") != (o.Work == "") {
			t.Fatalf("accepted %q as %+v", in, o)
		}
		for _, p := range o.Lower {
			if strings.ContainsAny(p, `\:`) {
				t.Fatalf("accepted lower layer %q from %q", p, in)
			}
		}
		for _, p := range []string{o.Upper, o.Work} {
			if strings.Contains(p, `\`) {
				t.Fatalf("accepted upper or work layer %q from %q", p, in)
			}
		}
		for _, p := range append(slices.Clone(o.Lower), o.Upper, o.Work) {
			if p == "" && o.Upper == "" {
				continue
			}
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
				t.Fatalf("accepted layer %q from %q", p, in)
			}
		}
		for _, v := range o.Values {
			if !slices.Contains(overlayValues[v[0]], v[1]) {
				t.Fatalf("accepted %s=%s from %q", v[0], v[1], in)
			}
		}
	})
}
