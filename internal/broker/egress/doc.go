// Package egress is the egress broker: the HTTP proxy an agent reaches
// through HTTP_PROXY/HTTPS_PROXY, and the only way any byte of the
// agent's general network traffic leaves the sandbox (design decision 1:
// the sandbox has nothing to route to; this proxy is the declared route).
//
// It owns the "Network egress" crossing of the isolation contract: a
// hostname allowlist with ports, trusted-side name resolution, a check of
// every resolved address against denied ranges (loopback, private,
// link-local and metadata, CGNAT, multicast, reserved, documentation,
// the host's own addresses, and IPv6 forms that embed any of those), the
// TLS SNI of a CONNECT to port 443 bound to the CONNECT host, connection
// and byte budgets held in the crossing.Authority, and one receipt per
// connection.
//
// Plane: unprivileged — it runs in the gateway process
// (internal/gateway/proc) and parses agent bytes; its trusted half, on
// the root side, is ./authority, reached over the egress broker's own
// authority channel. Its wire messages are crossing's metered operations
// (crossing.Remote); its configuration is Config.
//
// It must never:
//   - resolve a name the allowlist denies (the allowlist is matched first);
//   - dial anything but an address it has just checked (it dials the
//     address, never the name again, so DNS rebinding has nothing to
//     rebind);
//   - let an IP literal through, in any spelling ("127.1", "2130706433",
//     "0x7f.1", "[::1]"): the allowlist holds names only;
//   - let a tunnel on port 443 start before the ClientHello's SNI has been
//     checked against the CONNECT host;
//   - run a crossing without a boundary-derived identity, or when the
//     authority refuses or cannot be reached (contract section 9: an
//     unavailable dependency denies the crossing; there is no direct-path
//     fallback);
//   - hang: the ClientHello read, resolution, dial and idle periods all
//     have deadlines.
//
// Denials are 403 Forbidden with an X-Cordon-Reason header carrying one of
// the Reason… codes; malformed requests are 400. A tunnel cut after it was
// allowed (byte budget, idle) is recorded in its receipt with decision
// "allow" and the cut's reason.
package egress
