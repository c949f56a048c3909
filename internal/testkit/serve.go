package testkit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cordon-project/cordon/internal/crossing"
)

// ServeAs serves h on a loopback listener whose connections carry id in
// their context, bound once per accepted connection the way the gateway
// process binds its sandbox's identity (http.Server.ConnContext), so a
// broker under test sees what it sees in the gateway. The server is
// closed when t ends.
func ServeAs(t testing.TB, h http.Handler, id crossing.Identity) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context { return crossing.WithIdentity(ctx, id) }
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}
