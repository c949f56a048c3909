package config

// Crossings bound what one sandbox's crossings cost the host: the
// privileged side's work per crossing (policy, SQLite, the evidence log)
// runs outside the sandbox's cgroups, and every crossing adds a receipt to
// the host's store. Every crossing kind counts: model, egress, tool and
// state crossings, and refusals that are receipted. Every field has a
// default; none can be switched off.
type Crossings struct {
	// MaxReceipts bounds the receipts one sandbox adds to the store, > 0.
	// Past it crossings are refused (one marker receipt records that the
	// bound was reached; the refusals are counted and recorded in one
	// receipt when the sandbox stops). Default 100000. Key: max_receipts.
	MaxReceipts int64
	// Rate bounds the crossings one sandbox opens per second, > 0;
	// Burst is how many may come at once, >= 1. Past it a crossing is
	// refused before any store work. Default 50 and 500. Keys: rate,
	// burst.
	Rate  int64
	Burst int64
}

// Crossings defaults and bounds.
const (
	DefaultMaxReceipts   = 100000
	DefaultCrossingRate  = 50
	DefaultCrossingBurst = 500
	maxMaxReceipts       = 100_000_000
	maxCrossingRate      = 100_000
)

type rawCrossings struct {
	MaxReceipts intValue `yaml:"max_receipts"`
	Rate        intValue `yaml:"rate"`
	Burst       intValue `yaml:"burst"`
}

func buildCrossings(c *Config, raw *rawCrossings, ix *index) {
	c.Crossings = Crossings{MaxReceipts: DefaultMaxReceipts, Rate: DefaultCrossingRate, Burst: DefaultCrossingBurst}
	for _, f := range []struct {
		key string
		v   intValue
		hi  int64
		dst *int64
	}{
		{"max_receipts", raw.MaxReceipts, maxMaxReceipts, &c.Crossings.MaxReceipts},
		{"rate", raw.Rate, maxCrossingRate, &c.Crossings.Rate},
		{"burst", raw.Burst, maxCrossingRate, &c.Crossings.Burst},
	} {
		if !f.v.set {
			continue
		}
		if f.v.n <= 0 || f.v.n > f.hi {
			ix.errf("crossings."+f.key, "is %d; want 1 to %d (it cannot be switched off)", f.v.n, f.hi)
		}
		*f.dst = f.v.n
	}
}
