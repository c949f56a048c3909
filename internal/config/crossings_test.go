package config

import (
	"strings"
	"testing"
)

func defaultCrossings() Crossings {
	return Crossings{MaxReceipts: DefaultMaxReceipts, Rate: DefaultCrossingRate, Burst: DefaultCrossingBurst}
}

func TestCrossings(t *testing.T) {
	c, err := Parse([]byte(head+"crossings:\n  max_receipts: 500\n  rate: 5\n  burst: 10\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Crossings{MaxReceipts: 500, Rate: 5, Burst: 10}); c.Crossings != want {
		t.Fatalf("Crossings = %+v, want %+v", c.Crossings, want)
	}
	for _, bad := range []string{"max_receipts: 0", "rate: -1", "burst: 0", "rate: 1.5", "max_receipts: 1000000000", "unknown: 1"} {
		_, err := Parse([]byte(head+"crossings:\n  "+bad+"\n"), "c.yaml")
		if err == nil || !strings.Contains(err.Error(), "crossings") {
			t.Errorf("Parse(crossings: %s) = %v, want an error naming crossings", bad, err)
		}
	}
}
