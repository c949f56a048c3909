package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/store"
)

// tool_await answered the state of any approval of the workload, another
// sandbox's too: a compromised gateway could watch what a sibling sandbox
// asks for and when an operator answers it. An approval is good for the
// sandbox that asked only (its digest names it). Observed from the
// channel: another sandbox's approval is not found; the sandbox's own is
// answered (positive control).
func TestToolAwaitSeesOnlyItsSandboxesApprovals(t *testing.T) {
	srv, c, st := policyServer(t)
	ctx := context.Background()
	ask := func(sandbox, digest string) string {
		t.Helper()
		a, err := st.RequestApproval(ctx, store.Approval{Workload: srv.ID.Workload, SandboxID: sandbox, Action: "tool.call",
			Target: "fs/write", Digest: "sha256:" + digest}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return a.ID
	}
	theirs := ask("sb-sibling", strings.Repeat("1", 64))
	mine := ask(srv.ID.SandboxID, strings.Repeat("2", 64))
	if _, err := c.AwaitApproval(ctx, theirs, 0); !errors.Is(err, tool.ErrDenied) {
		t.Fatalf("await of a sibling sandbox's approval = %v, want ErrDenied (not found)", err)
	}
	if state, err := c.AwaitApproval(ctx, mine, 0); err != nil || state != store.ApprovalPending {
		t.Fatalf("await of the sandbox's own approval = %q, %v, want pending", state, err)
	}
}
