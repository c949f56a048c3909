package config

import "time"

// State bounds the workload's managed state: the durable entries the
// agent keeps through the state broker, scoped by tenant, workload and
// purpose and shared by every sandbox of that scope. Every field has a
// default.
type State struct {
	// QuotaBytes bounds the keys and values the scope holds; a size, > 0.
	// Default 16MiB. Key: quota_bytes.
	QuotaBytes int64
	// QuotaEntries bounds the entries the scope holds, > 0. Default
	// 10000. Key: quota_entries.
	QuotaEntries int64
	// MaxValueBytes bounds one value; a size from 1 byte to 128KiB (a
	// value crosses to the privileged side in one message), at most
	// QuotaBytes. Default 64KiB. Key: max_value_bytes.
	MaxValueBytes int64
	// Retention removes an entry not written for this long ("30d",
	// "12h"); 0 keeps entries until they are deleted or the scope is
	// reset. Applied to what is stored when a run starts. Default 0. Key:
	// retention.
	Retention time.Duration
}

// State defaults and bounds.
const (
	DefaultStateQuotaBytes    = 16 << 20
	DefaultStateQuotaEntries  = 10000
	DefaultStateMaxValueBytes = 64 << 10
	// MaxStateValueBytesLimit is the largest max_value_bytes.
	MaxStateValueBytesLimit = 128 << 10
	maxStateQuotaBytes      = 1 << 40
	maxStateQuotaEntries    = 10_000_000
)

type rawState struct {
	QuotaBytes    sizeValue `yaml:"quota_bytes"`
	QuotaEntries  intValue  `yaml:"quota_entries"`
	MaxValueBytes sizeValue `yaml:"max_value_bytes"`
	Retention     string    `yaml:"retention"`
}

func buildState(c *Config, raw *rawState, ix *index) {
	c.State = State{QuotaBytes: DefaultStateQuotaBytes, QuotaEntries: DefaultStateQuotaEntries, MaxValueBytes: DefaultStateMaxValueBytes}
	for _, f := range []struct {
		key    string
		n      int64
		set    bool
		hi     int64
		dst    *int64
		what   string
		hiDesc string
	}{
		{"quota_bytes", raw.QuotaBytes.n, raw.QuotaBytes.set, maxStateQuotaBytes, &c.State.QuotaBytes, "a positive size", "1TiB"},
		{"quota_entries", raw.QuotaEntries.n, raw.QuotaEntries.set, maxStateQuotaEntries, &c.State.QuotaEntries, "a positive number", "10000000"},
		{"max_value_bytes", raw.MaxValueBytes.n, raw.MaxValueBytes.set, MaxStateValueBytesLimit, &c.State.MaxValueBytes, "a positive size", "128KiB"},
	} {
		if !f.set {
			continue
		}
		if f.n <= 0 || f.n > f.hi {
			ix.errf("state."+f.key, "is %d; want %s up to %s", f.n, f.what, f.hiDesc)
		}
		*f.dst = f.n
	}
	if raw.MaxValueBytes.set && raw.QuotaBytes.set && c.State.MaxValueBytes > c.State.QuotaBytes {
		ix.errf("state.max_value_bytes", "is %d, more than state.quota_bytes (%d)", c.State.MaxValueBytes, c.State.QuotaBytes)
	}
	if raw.QuotaBytes.set && !raw.MaxValueBytes.set && c.State.QuotaBytes < c.State.MaxValueBytes {
		// A small quota lowers the default bound of one value with it.
		c.State.MaxValueBytes = c.State.QuotaBytes
	}
	if raw.Retention != "" {
		d, err := parseWindow(raw.Retention)
		if err != nil {
			ix.errf("state.retention", "%v", err)
		}
		c.State.Retention = d
	}
}
