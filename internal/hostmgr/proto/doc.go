// Package proto is the transport of cordon-host/v1, the protocol between
// `cordon daemon` (root, on the host) and its callers (the CLI). It owns the
// message codec, the version rule, the naming rule, and the Unix socket:
// its ownership and mode, the caller's kernel-given identity, descriptor
// passing and connection limits. The daemon (internal/hostmgr) owns the
// operations and authorises each one for the caller.
//
// It must never take the caller's word for who the caller is (Peer comes
// from SO_PEERCRED), never widen the socket beyond its owner and one group,
// never keep a descriptor it could not hand to a handler, and never answer
// a frame it could not decode with anything but a refusal. The protocol
// has no field for shell text or for a host path, and the daemon must not
// add one: a workspace travels as a descriptor the caller opened itself
// (the daemon checks its owner with Peer.Owns), and every name passes
// ValidName.
//
// The codec (codec.go) knows nothing of sockets, and the serving loop
// (serve.go) works over any transport that moves whole frames with
// descriptors beside them; only unix_linux.go is about AF_UNIX. A TLS
// transport for several hosts would add its own listener and identity.
//
// # Wire format
//
// docs/host-protocol.md is the reference; in short:
//
// Connection. An AF_UNIX SOCK_SEQPACKET connection to the daemon's
// socket. Each datagram is one frame; a frame is one JSON object in UTF-8
// of at most MaxFrame (262144) bytes, with no length prefix and no
// delimiter. A request may carry up to MaxFiles (8) descriptors as one
// SCM_RIGHTS control message on its datagram. Responses carry none but
// where the operation defines them (exec with a terminal: the pty master
// beside its started response), and a client takes them only where it
// asked for them (Client.CallFiles); anywhere else they are refused. An
// empty datagram, like a hang-up, ends the connection.
//
// A request has these members:
//
//   - version: the string "cordon-host/v1", compared byte for byte.
//   - id: an integer from 1 to 2^53-1 that the client chooses; the
//     responses carry it back.
//   - op: the operation, matching ^[a-z][a-z._-]{0,31}$.
//   - args: an object whose members the operation defines; absent when it
//     takes none.
//
// For example:
//
//	{"version":"cordon-host/v1","id":1,"op":"sandbox.create","args":{"name":"web"}}
//
// A response has these:
//
//   - version, id: as in the request answered; id 0 answers no request and
//     refuses the whole connection (which the daemon then closes).
//   - final: true on the last response to the request; an operation may
//     send non-final responses before it (exec: started, then exited).
//   - error: {"kind": one of the Kind constants, "message": a non-empty
//     sentence, "failure": optionally the failure kind of package failure,
//     kept end to end}; an error response is final and has no result.
//   - result: any JSON value but null, defined by the operation; absent
//     when there is none.
//
// For example:
//
//	{"version":"cordon-host/v1","id":1,"final":false,"result":{"state":"started"}}
//	{"version":"cordon-host/v1","id":1,"final":true,"error":{"kind":"not_found","message":"no sandbox web"}}
//
// Strictness. Both sides refuse a frame that is not exactly one object,
// is nested deeper than MaxDepth (32), names a member twice in any object
// (compared ignoring case, as encoding/json matches names), has a member
// other than the ones above (top level, and in error), or has a member of
// the wrong type (null included). The daemon answers such a request with
// a final error response — against its id when the frame had a readable
// one, else 0 — and closes the connection.
//
// Version rule. There is no negotiation. A peer that receives another
// version refuses it with kind "version" and a message naming both ("this
// daemon speaks cordon-host/v1; the client sent cordon-host/v2: upgrade
// the client or the daemon"), before it looks at any other member. Since
// unknown members are refused, any change to the frame needs a new
// version; a new operation does not.
//
// Order. A connection's requests are served one at a time, in order;
// different connections concurrently, up to Listener.MaxConns (further
// connections get an "unavailable" refusal with id 0). Closing the
// connection cancels the request being served.
//
// Identity. The daemon reads the caller's uid, gid and pid once per
// connection with SO_PEERCRED: they are the credentials of the process
// that called connect(), as the kernel recorded them then. A connected
// socket handed to another process keeps them, and a pid may be reused:
// authorise by uid and gid. Who may connect at all is the socket file's
// owner, group and mode (Listen).
//
// Plane: root and CLI (the daemon serves it; its clients run as their own
// uid). It is a codec and a transport: it must never decide who may do
// what (the daemon's operation table does), never trust a peer's claim
// about itself over SO_PEERCRED, and never put a host path or a secret in
// an error sent on the wire.
package proto
