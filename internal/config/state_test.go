package config

import (
	"strings"
	"testing"
	"time"
)

func defaultState() State {
	return State{QuotaBytes: DefaultStateQuotaBytes, QuotaEntries: DefaultStateQuotaEntries, MaxValueBytes: DefaultStateMaxValueBytes}
}

func TestParseState(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want State
	}{
		{"", defaultState()},
		{"state: {quota_bytes: 1MiB, quota_entries: 50, max_value_bytes: 4KiB, retention: 30d}\n",
			State{QuotaBytes: 1 << 20, QuotaEntries: 50, MaxValueBytes: 4 << 10, Retention: 30 * 24 * time.Hour}},
		{"state: {retention: 12h}\n", State{QuotaBytes: DefaultStateQuotaBytes, QuotaEntries: DefaultStateQuotaEntries, MaxValueBytes: DefaultStateMaxValueBytes, Retention: 12 * time.Hour}},
		{"state: {max_value_bytes: 128KiB}\n", State{QuotaBytes: DefaultStateQuotaBytes, QuotaEntries: DefaultStateQuotaEntries, MaxValueBytes: 128 << 10}},
		// A quota below the default value bound lowers it.
		{"state: {quota_bytes: 2KiB}\n", State{QuotaBytes: 2 << 10, QuotaEntries: DefaultStateQuotaEntries, MaxValueBytes: 2 << 10}},
	} {
		got, err := Parse([]byte(head+c.yaml), "s.yaml")
		if err != nil {
			t.Errorf("Parse(%q) = %v", c.yaml, err)
			continue
		}
		if got.State != c.want {
			t.Errorf("Parse(%q).State = %+v, want %+v", c.yaml, got.State, c.want)
		}
	}
}

func TestParseStateErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"state: {quota_bytes: 0}", "state.quota_bytes: is 0; want a positive size"},
		{"state: {quota_bytes: 2TiB}", "state.quota_bytes"},
		{"state: {quota_entries: -1}", "state.quota_entries: is -1"},
		{"state: {quota_entries: 1.5}", "want an integer"},
		{"state: {max_value_bytes: 129KiB}", "state.max_value_bytes: is 132096; want a positive size up to 128KiB"},
		{"state: {max_value_bytes: 0}", "state.max_value_bytes"},
		{"state: {quota_bytes: 1KiB, max_value_bytes: 2KiB}", "more than state.quota_bytes"},
		{"state: {retention: forever}", "state.retention"},
		{"state: {retention: 10ms}", "at least 1s"},
		{"state: {retention: 0d}", "state.retention"},
		{"state: {ttl: 1h}", "ttl"},
		{"state: [1]", "state"},
	} {
		_, err := Parse([]byte(head+c.yaml+"\n"), "s.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", c.yaml, err, c.want)
		}
	}
}
