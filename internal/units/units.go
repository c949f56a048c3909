package units

import (
	"fmt"
	"math/big"
	"regexp"
	"strings"

	"github.com/cordon-project/cordon/internal/failure"
)

// Max is the largest size Parse accepts: 4EiB.
const Max int64 = 1 << 62

// maxLen bounds the text Parse looks at: no size needs more.
const maxLen = 64

// Grammar is the grammar in one line, for error messages and help text.
const Grammar = "a whole number of bytes, or a number with a 1024-based unit K, M, G or T (optionally followed by B or iB), e.g. 1048576, 512M, 2.5G, 64KiB"

var sizeRE = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]+))?\s*(?:([KMGTkmgt])(?:[iI][bB]?|[bB])?|([bB]))?$`)

var shifts = map[string]uint{"k": 10, "m": 20, "g": 30, "t": 40}

// Error is a size Parse refuses. It carries failure.KindUsage.
type Error struct {
	Input  string // the text as given (quoted when printed)
	Reason string
}

func (e *Error) Error() string {
	in := e.Input
	if len(in) > maxLen {
		in = in[:maxLen] + "..."
	}
	return fmt.Sprintf("size %q: %s", in, e.Reason)
}

// FailureKind makes an *Error a failure.Carrier: bad input from the user.
func (e *Error) FailureKind() failure.Kind { return failure.KindUsage }

// Parse reads a size in the package's grammar and returns the number of
// bytes, 0 ≤ n ≤ Max.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	switch {
	case t == "":
		return 0, &Error{Input: s, Reason: "empty; want " + Grammar}
	case len(t) > maxLen:
		return 0, &Error{Input: s, Reason: "too long; want " + Grammar}
	}
	m := sizeRE.FindStringSubmatch(t)
	if m == nil {
		if strings.HasPrefix(t, "-") {
			return 0, &Error{Input: s, Reason: "is negative"}
		}
		return 0, &Error{Input: s, Reason: "want " + Grammar}
	}
	whole, frac, prefix := m[1], m[2], strings.ToLower(m[3])
	if frac != "" && prefix == "" {
		return 0, &Error{Input: s, Reason: "a fraction of a byte; a fraction needs a unit K, M, G or T (e.g. 1.5G)"}
	}
	// Exact arithmetic: (whole.frac × 2^shift) rounded down, no float.
	num, ok := new(big.Int).SetString(whole+frac, 10)
	if !ok {
		return 0, &Error{Input: s, Reason: "want " + Grammar}
	}
	num.Lsh(num, shifts[prefix])
	num.Quo(num, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac))), nil))
	if num.Cmp(big.NewInt(Max)) > 0 {
		return 0, &Error{Input: s, Reason: "too large (at most 4EiB)"}
	}
	return num.Int64(), nil
}

// Format renders n bytes with the largest 1024-based unit that divides it
// exactly (2GiB, 1536KiB, 100B); Parse reads it back to n.
func Format(n int64) string {
	for _, u := range []struct {
		s     string
		shift uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.s)
		}
	}
	return fmt.Sprintf("%dB", n)
}
