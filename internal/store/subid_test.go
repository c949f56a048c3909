package store

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSubIDs(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []idRange
		wantErr bool
	}{
		{in: "", want: nil},
		{in: "root:100000:65536\n", want: []idRange{{100000, 165536}}},
		{in: "root:100000:65536\n\n# comment\n  alice:200000:65536  \r\n1000:300000:1", want: []idRange{{100000, 165536}, {200000, 265536}, {300000, 300001}}},
		{in: "root:4294901759:65536\n", want: []idRange{{4294901759, 4294967295}}},
		{in: "root:5:0\n", want: []idRange{{5, 5}}},
		{in: "root:4294901760:65536\n", wantErr: true}, // would include (uid_t)-1
		{in: "root:100000\n", wantErr: true},
		{in: "root:100000:65536:x\n", wantErr: true},
		{in: ":100000:65536\n", wantErr: true},
		{in: "root::65536\n", wantErr: true},
		{in: "root:100000:\n", wantErr: true},
		{in: "root:-1:65536\n", wantErr: true},
		{in: "root:+1:65536\n", wantErr: true},
		{in: "root:0x10:65536\n", wantErr: true},
		{in: "root:1_000:65536\n", wantErr: true},
		{in: "root: 100000:65536\n", wantErr: true},
		{in: "root:4294967296:1\n", wantErr: true},
		{in: "root:100000:65536\ngarbage\n", wantErr: true},
	} {
		got, err := parseSubIDs([]byte(tc.in))
		if gotErr := err != nil; gotErr != tc.wantErr {
			t.Errorf("parseSubIDs(%q) = %v, %v, want error: %v", tc.in, got, err, tc.wantErr)
			continue
		}
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(idRange{})); err == nil && diff != "" {
			t.Errorf("parseSubIDs(%q) mismatch (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestParseIDDB(t *testing.T) {
	for _, tc := range []struct {
		in      string
		fields  int
		want    []uint32
		wantErr bool
	}{
		{in: "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", fields: 7, want: []uint32{0, 65534}},
		{in: "+::::::\n-bob::::::\n# c\n\nroot:x:0:\n", fields: 4, want: []uint32{0}},
		{in: "root:x:0:0:root:/root\n", fields: 7, wantErr: true},
		{in: "root:x:zero:\n", fields: 4, wantErr: true},
		{in: "root:x::\n", fields: 4, wantErr: true},
	} {
		got, err := parseIDDB([]byte(tc.in), tc.fields)
		if gotErr := err != nil; gotErr != tc.wantErr {
			t.Errorf("parseIDDB(%q, %d) = %v, %v, want error: %v", tc.in, tc.fields, got, err, tc.wantErr)
			continue
		}
		if diff := cmp.Diff(tc.want, got); err == nil && diff != "" {
			t.Errorf("parseIDDB(%q, %d) mismatch (-want +got):\n%s", tc.in, tc.fields, diff)
		}
	}
}

// FuzzParseSubIDs: the parser never panics, and every range it accepts lies
// within the valid ids, so an accepted file is one we can reason about.
func FuzzParseSubIDs(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		ranges, err := parseSubIDs(data)
		if err != nil {
			if ranges != nil {
				t.Errorf("parseSubIDs(%q) = %v with error %v, want no ranges", data, ranges, err)
			}
			return
		}
		for _, r := range ranges {
			if r.lo > r.hi || r.hi > maxIDEnd {
				t.Errorf("parseSubIDs(%q) accepted range [%d, %d)", data, r.lo, r.hi)
			}
		}
	})
}
