package state

import (
	"context"

	"github.com/cordon-project/cordon/internal/crossing"
)

// Remote is the Authority the state broker uses in the gateway process: one
// operation over the authority channel per request, its op the request's
// (the root side takes the op from the envelope, whatever the body says).
type Remote struct{ C crossing.Caller }

var _ Authority = Remote{}

// State sends r and returns the answer; a refusal is its typed error
// with its details in the Response.
func (r Remote) State(ctx context.Context, req Request) (Response, error) {
	var out Response
	err := r.C.Call(ctx, req.Op, req, &out)
	return out, err
}
