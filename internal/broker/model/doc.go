// Package model is the Model Access Broker: the http.Handler behind the
// gateway's model listener (ANTHROPIC_BASE_URL, OPENAI_BASE_URL), and the
// only component that reaches a model provider or holds a model route's
// credential.
//
// It owns the "Model requests and responses, including streams and
// attachments" crossing of the isolation contract (sections 3, 5 and 8):
// for every call it takes the workload from the identity the gateway bound
// to the connection, guards the request (size, strict JSON, a "model"
// string, inline attachments counted and checked for media type and
// decoded size), picks the declared route whose model globs allow the
// model, reserves budget in the crossing.Ledger (requests, estimated input
// tokens, the requested output tokens, bytes, a stream slot), injects the
// route's credential, relays the answer — streams event by event, flushed
// as they arrive — while guarding it (size, well-formed events, redaction
// of every custodied value), settles the real usage and records one
// receipt. Refusals are shaped as the provider's own errors so agents'
// SDKs report them plainly.
//
// It must never:
//   - forward an agent's credential: Authorization, x-api-key,
//     Proxy-Authorization and Cookie are dropped with every header not on a
//     short allowlist; the route's credential is added toward the route's
//     upstream only (no redirect is followed);
//   - forward a request it has not validated, or different bytes from the
//     ones it validated (the body is never re-serialized), or a body whose
//     members it might read differently from the provider (duplicate
//     security-relevant members are refused);
//   - execute a tool call: tool_use blocks, tool_calls and *_call items are
//     passed to the agent as data and listed as untrusted in the receipt;
//   - send a secret to the agent: custodied values, raw or JSON-escaped,
//     are redacted from every response byte and allowed header, also when
//     a value is split across reads;
//   - let a call through when identity, the ledger or the credential is
//     unavailable (section 9: unavailable dependencies deny; there is no
//     direct-path fallback), or hold budget for a client that went away
//     (the upstream call follows the agent's request context and a stalled
//     writer times out).
//
// Attachments must be inline. A remote URL (Anthropic "url" sources,
// OpenAI http(s) image URLs, file_url) would have the provider fetch a
// destination no one declared, and a provider file reference (file_id,
// "file" sources) could name data the route's account holds for someone
// else; both are refused, as are remote MCP connectors (Anthropic
// mcp_servers, OpenAI "mcp" tools with a server_url).
//
// Non-claims: redaction matches bytes, so a secret a model emitted token by
// token across several stream events is not caught (the broker never sends
// a credential to the model, so the model should not know one); usage not
// reported by the provider (OpenAI chat streams without include_usage)
// settles at the reserved estimate; the input-token estimate is
// len(body)/4, which overstates requests that carry attachments.
package model
