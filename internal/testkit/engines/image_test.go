package engines

import "testing"

func TestCacheName(t *testing.T) {
	for _, c := range []struct {
		variant string
		include []string
		want    string
	}{
		{"minbase", []string{"procps"}, "bookworm-minbase-procps.tar"},
		{"apt", []string{"man-db"}, "bookworm-apt-man-db.tar"},
		{"minbase", nil, "bookworm-minbase.tar"},
	} {
		if got := cacheName(c.variant, c.include); got != c.want {
			t.Errorf("cacheName(%q, %q) = %q, want %q", c.variant, c.include, got, c.want)
		}
	}
}
