package unitstest

// Case is a size text and what Parse makes of it: Want bytes, or, when
// Err is set, an error whose text contains Err.
type Case struct {
	Text string
	Want int64
	Err  string
}

// Sizes is the table.
var Sizes = []Case{
	// plain bytes
	{Text: "0", Want: 0},
	{Text: "4096", Want: 4096},
	{Text: "1048576", Want: 1 << 20},
	{Text: "100B", Want: 100},
	{Text: "100b", Want: 100},
	// each prefix, with and without B / iB / i, any case
	{Text: "1K", Want: 1 << 10},
	{Text: "1k", Want: 1 << 10},
	{Text: "1KB", Want: 1 << 10},
	{Text: "1KiB", Want: 1 << 10},
	{Text: "1kib", Want: 1 << 10},
	{Text: "1Ki", Want: 1 << 10},
	{Text: "512M", Want: 512 << 20},
	{Text: "512MB", Want: 512 << 20},
	{Text: "512MiB", Want: 512 << 20},
	{Text: "512mb", Want: 512 << 20},
	{Text: "2G", Want: 2 << 30},
	{Text: "2Gi", Want: 2 << 30},
	{Text: "2GiB", Want: 2 << 30},
	{Text: "2gb", Want: 2 << 30},
	{Text: "1T", Want: 1 << 40},
	{Text: "1TiB", Want: 1 << 40},
	{Text: "1 G", Want: 1 << 30},
	{Text: " 512M ", Want: 512 << 20},
	{Text: "007M", Want: 7 << 20},
	// fractions: exact, rounded down to a whole byte
	{Text: "2.5G", Want: 5 << 29},
	{Text: "1.5GiB", Want: 3 << 29},
	{Text: "0.5K", Want: 512},
	{Text: "1.1K", Want: 1126},
	{Text: "0.1M", Want: 104857},
	{Text: "1.0000000000000000001T", Want: 1 << 40},
	// the bound: 4EiB
	{Text: "4194304T", Want: 1 << 62},
	{Text: "4611686018427387904", Want: 1 << 62},
	{Text: "4194304.0000001T", Err: "too large"},
	{Text: "4611686018427387905", Err: "too large"},
	{Text: "9223372036854775808", Err: "too large"},
	{Text: "99999999T", Err: "too large"},
	// refused
	{Text: "", Err: "empty"},
	{Text: "-1", Err: "is negative"},
	{Text: "-1G", Err: "is negative"},
	{Text: "1.5", Err: "a fraction of a byte"},
	{Text: "1.5B", Err: "a fraction of a byte"},
	{Text: "+1G", Err: "want a whole number"},
	{Text: "1e3", Err: "want a whole number"},
	{Text: "0x10", Err: "want a whole number"},
	{Text: "1_000", Err: "want a whole number"},
	{Text: "1,5G", Err: "want a whole number"},
	{Text: "1PB", Err: "want a whole number"},
	{Text: "12X", Err: "want a whole number"},
	{Text: "G", Err: "want a whole number"},
	{Text: ".5G", Err: "want a whole number"},
	{Text: "5.G", Err: "want a whole number"},
	{Text: "1GiBB", Err: "want a whole number"},
	{Text: "1iB", Err: "want a whole number"},
	{Text: "NaN", Err: "want a whole number"},
	{Text: "Inf", Err: "want a whole number"},
	{Text: "１G", Err: "want a whole number"},
	{Text: "1G 2G", Err: "want a whole number"},
	{Text: "11111111111111111111111111111111111111111111111111111111111111111", Err: "too long"},
}
