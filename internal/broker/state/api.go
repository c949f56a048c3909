package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Name is the broker's name in receipts.
const Name = "state"

// Path is the API's root on the state listener.
const Path = "/v1/state"

// Bounds.
const (
	// MaxKeyBytes bounds a key.
	MaxKeyBytes = 256
	// MaxValueBytesLimit is the largest value any configuration allows:
	// a value crosses to the privileged side in one authority message.
	MaxValueBytesLimit = 128 << 10
	// DefaultListLimit and MaxListLimit bound a listing page.
	DefaultListLimit = 100
	MaxListLimit     = 200
	// ExportPageEntries and ExportPageBytes bound one page of an export
	// as it crosses from the privileged side (a page always holds at
	// least one entry, so one value of MaxValueBytesLimit fits too).
	ExportPageEntries = 100
	ExportPageBytes   = 64 << 10
	// ScopeTarget is the policy resource id (State::"*") of operations
	// on the whole scope: list, export and reset. It cannot be a key.
	ScopeTarget = "*"
)

// Operations.
const (
	OpGet    = "get"
	OpPut    = "put"
	OpDelete = "delete"
	OpList   = "list"
	OpExport = "export"
	OpReset  = "reset"
)

// Request is one operation on the sandbox's state, as it crosses to the
// privileged side. It never names a scope.
type Request struct {
	Op    string `json:"op"`
	Key   string `json:"key,omitempty"`
	Value []byte `json:"value,omitempty"` // put
	// Preconditions of put and delete; at most one is set.
	IfMatch  int64 `json:"if_match,omitempty"`  // If-Match: "<version>"
	IfExists bool  `json:"if_exists,omitempty"` // If-Match: *
	IfAbsent bool  `json:"if_absent,omitempty"` // If-None-Match: * (put)
	// List and export.
	Prefix string `json:"prefix,omitempty"`
	After  string `json:"after,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// Provenance says where an entry's value came from.
type Provenance struct {
	// SandboxID is the sandbox that wrote the value.
	SandboxID string `json:"sandbox_id"`
	// Written is when.
	Written time.Time `json:"written"`
	// Receipt is the id of the write's receipt.
	Receipt int64 `json:"receipt"`
	// Trust is always "untrusted": an agent wrote it.
	Trust string `json:"trust"`
}

// TrustAgent is the trust of every value: written by an agent.
const TrustAgent = "untrusted"

// Entry is one entry's metadata, and its value for get and export.
type Entry struct {
	Key        string     `json:"key"`
	Version    int64      `json:"version"`
	Size       int64      `json:"size"` // bytes of the value
	Created    time.Time  `json:"created"`
	Updated    time.Time  `json:"updated"`
	Expires    time.Time  `json:"expires,omitzero"` // absent: kept until deleted or reset
	Provenance Provenance `json:"provenance"`
	Value      []byte     `json:"value,omitempty"` // base64 in JSON
}

// Usage is what the scope holds against its quota.
type Usage struct {
	Bytes         int64 `json:"bytes"` // keys and values
	Entries       int64 `json:"entries"`
	QuotaBytes    int64 `json:"quota_bytes"`
	QuotaEntries  int64 `json:"quota_entries"`
	MaxValueBytes int64 `json:"max_value_bytes"`
	// RetentionSeconds is how long an entry is kept after its last
	// write; 0: until deleted or reset.
	RetentionSeconds int64 `json:"retention_seconds"`
}

// Scope is whose state it is; the privileged side fills it in from the
// sandbox's identity.
type Scope struct {
	Tenant   string `json:"tenant"`
	Workload string `json:"workload"`
	Purpose  string `json:"purpose"`
}

// Response is the privileged side's answer.
type Response struct {
	Entry   *Entry  `json:"entry,omitempty"`   // get, put
	Created bool    `json:"created,omitempty"` // put
	Entries []Entry `json:"entries,omitempty"` // list, export
	// More is set when a list or export has entries after the last one
	// returned.
	More    bool   `json:"more,omitempty"`
	Usage   *Usage `json:"usage,omitempty"`   // list, export, put
	Scope   *Scope `json:"scope,omitempty"`   // export
	Deleted int64  `json:"deleted,omitempty"` // reset
	// Receipt is the operation's receipt id.
	Receipt int64 `json:"receipt,omitempty"`
	// Refusal details: the entry's current version (0: absent) for
	// ErrPrecondition, the quota for ErrQuota, the bound for
	// ErrTooLarge.
	Current int64  `json:"current,omitempty"`
	Quota   string `json:"quota,omitempty"`
	Limit   int64  `json:"limit,omitempty"`
	Used    int64  `json:"used,omitempty"`
	Needed  int64  `json:"needed,omitempty"`
	// Approval is the approval the operation used, or, refused with
	// crossing.ErrApprovalPending or ErrApprovalDenied, the one it
	// waits on or that refused it.
	Approval *crossing.ApprovalRef `json:"approval,omitempty"`
}

// Authority is the privileged side of the state broker: it stamps the
// sandbox's scope, asks policy, applies the operation to the store and
// records its receipt before it answers. Refusals are the errors below
// (with their details in the Response), crossing.ErrPolicyDenied, or
// crossing.ErrUnavailable.
type Authority interface {
	State(ctx context.Context, r Request) (Response, error)
}

// Typed refusals.
var (
	// ErrNotFound: the scope has no entry with the key. A key of another
	// scope is not found, exactly like one never written.
	ErrNotFound = errors.New("no state entry with this key")
	// ErrPrecondition: If-Match or If-None-Match failed.
	ErrPrecondition = errors.New("version precondition failed")
	// ErrQuota: the write would exceed the scope's quota.
	ErrQuota = errors.New("state quota exceeded")
	// ErrTooLarge: the value exceeds the configured bound.
	ErrTooLarge = errors.New("state value too large")
	// ErrInvalid: the request is malformed (a bad key, a bad header).
	ErrInvalid = errors.New("invalid state request")
)

// ValidKey reports why k is not a key, or nil: 1–256 bytes of A–Z, a–z,
// 0–9, '.', '_', '-' and '/', in '/'-separated segments, none empty
// (no leading, trailing or doubled '/'), none "." , and no "..".
func ValidKey(k string) error {
	if k == "" || len(k) > MaxKeyBytes {
		return fmt.Errorf("%w: a key is 1 to %d bytes", ErrInvalid, MaxKeyBytes)
	}
	if !keyChars(k) {
		return fmt.Errorf("%w: a key is made of A-Z, a-z, 0-9, '.', '_', '-' and '/'", ErrInvalid)
	}
	if strings.Contains(k, "..") {
		return fmt.Errorf("%w: a key may not contain \"..\"", ErrInvalid)
	}
	for seg := range strings.SplitSeq(k, "/") {
		if seg == "" || seg == "." {
			return fmt.Errorf("%w: a key's '/'-separated segments may not be empty or \".\"", ErrInvalid)
		}
	}
	return nil
}

// ValidCursor reports why s is not a list prefix or cursor, or nil: up
// to MaxKeyBytes of key characters (it need not be a whole key).
func ValidCursor(s string) error {
	if len(s) > MaxKeyBytes || !keyChars(s) {
		return fmt.Errorf("%w: prefix and after are up to %d bytes of key characters", ErrInvalid, MaxKeyBytes)
	}
	return nil
}

func keyChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/') {
			return false
		}
	}
	return true
}
