package approval

import (
	"time"

	"github.com/cordon-project/cordon/internal/store"
)

// ExpiresText is a time for a person: RFC 3339, or, for an approval held
// for its sandbox's life (store.HeldApprovalExpires), what ends it.
func ExpiresText(t time.Time) string {
	if t.Equal(store.HeldApprovalExpires) {
		return "never (held until revoked or its sandbox stops)"
	}
	return t.UTC().Format(time.RFC3339)
}
