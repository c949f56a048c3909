package gateway

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/broker/state"
	"github.com/cordon-project/cordon/internal/broker/tool"
	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/gateway/wire"
)

// testClient is a gateway process's side in tests: one authority channel
// per broker, each served by srv bound to its broker, and each call sent
// on the channel of the broker it is for.
type testClient struct {
	ch     map[string]*wire.Client
	conns  []net.Conn
	served chan struct{} // closed when every channel's Serve returned
	once   sync.Once
}

var (
	_ crossing.Authority      = (*testClient)(nil)
	_ crossing.SettleRecorder = (*testClient)(nil)
	_ tool.Authority          = (*testClient)(nil)
	_ state.Authority         = (*testClient)(nil)
)

// connect serves every broker's channel of srv over net.Pipe.
func connect(t *testing.T, srv *Authority) *testClient {
	return connectWith(t, srv, func(*testing.T) (net.Conn, net.Conn) { return net.Pipe() })
}

// connectWith serves every broker's channel of srv over pairs made by pair.
func connectWith(t *testing.T, srv *Authority, pair func(*testing.T) (net.Conn, net.Conn)) *testClient {
	t.Helper()
	c := &testClient{ch: map[string]*wire.Client{}, served: make(chan struct{})}
	var wg sync.WaitGroup
	for _, broker := range Brokers {
		a, b := pair(t)
		c.conns = append(c.conns, a)
		c.ch[broker] = wire.NewClient(a, broker)
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.Serve(b, broker)
		}()
	}
	go func() {
		wg.Wait()
		close(c.served)
	}()
	t.Cleanup(c.Close)
	return c
}

// Close closes the gateway's ends of every channel (the gateway died).
func (c *testClient) Close() {
	c.once.Do(func() {
		for _, conn := range c.conns {
			conn.Close()
		}
	})
}

func (c *testClient) metered(broker string) crossing.Remote {
	if broker == "" {
		broker = "model"
	}
	if ch := c.ch[broker]; ch != nil {
		return crossing.Remote{C: ch}
	}
	return crossing.Remote{C: c.ch["model"]}
}

func (c *testClient) Reserve(ctx context.Context, id crossing.Identity, broker string, want crossing.Amount, streams int64) (crossing.Reservation, crossing.BudgetState, error) {
	return c.metered(broker).Reserve(ctx, id, broker, want, streams)
}

func (c *testClient) Settle(ctx context.Context, r crossing.Reservation, used crossing.Amount) (crossing.BudgetState, error) {
	return c.metered(r.Broker).Settle(ctx, r, used)
}

func (c *testClient) SettleRecord(ctx context.Context, r crossing.Reservation, used crossing.Amount, rc crossing.Receipt) (crossing.BudgetState, error) {
	return c.metered(r.Broker).SettleRecord(ctx, r, used, rc)
}

func (c *testClient) Record(ctx context.Context, rc crossing.Receipt) error {
	return c.metered(rc.Broker).Record(ctx, rc)
}

func (c *testClient) toolRemote() tool.Remote { return tool.Remote{C: c.ch[tool.Name]} }

func (c *testClient) Filter(ctx context.Context, refs []tool.Ref) ([]bool, error) {
	return c.toolRemote().Filter(ctx, refs)
}

func (c *testClient) Begin(ctx context.Context, b tool.Begin) (tool.Began, error) {
	return c.toolRemote().Begin(ctx, b)
}

func (c *testClient) AwaitApproval(ctx context.Context, id string, wait time.Duration) (string, error) {
	return c.toolRemote().AwaitApproval(ctx, id, wait)
}

func (c *testClient) End(ctx context.Context, e tool.End) (int64, error) {
	return c.toolRemote().End(ctx, e)
}

func (c *testClient) State(ctx context.Context, r state.Request) (state.Response, error) {
	return state.Remote{C: c.ch[state.Name]}.State(ctx, r)
}

// ready reports the gateway serves, as the gateway process does.
func (c *testClient) ready() error { return c.ch["model"].Ready() }

// callers are the channels as the gateway process's brokers get them.
func (c *testClient) callers() map[string]crossing.Caller {
	out := map[string]crossing.Caller{}
	for b, ch := range c.ch {
		out[b] = ch
	}
	return out
}
