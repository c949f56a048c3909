package cli

import "testing"

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"512M", 512 << 20, true},
		{"2G", 2 << 30, true},
		{"2GiB", 2 << 30, true},
		{"2gb", 2 << 30, true},
		{"64KiB", 64 << 10, true},
		{"1048576", 1 << 20, true},
		{"1.5G", 3 << 29, true},
		{"100B", 100, true},
		{"", 0, false},
		{"-1G", 0, false},
		{"12X", 0, false},
		{"G", 0, false},
		{"1e400", 0, false},
		{"NaN", 0, false},
		{"99999999T", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("ParseSize(%q) = %d, %v, want %d (ok=%v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512M", "2GiB", "1", "-3k", "1.5t", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseSize(%q) = %d, want >= 0", s, n)
		}
	})
}
