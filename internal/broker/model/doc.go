// Package model is the Model Access Broker: the http.Handler behind the
// gateway's model listener (ANTHROPIC_BASE_URL, OPENAI_BASE_URL,
// GOOGLE_GEMINI_BASE_URL), and the
// only component that reaches a model provider or holds a model route's
// credential.
//
// It owns the "Model requests and responses, including streams and
// attachments" crossing of the isolation contract (sections 3, 5 and 8):
// for every call it takes the workload from the identity the gateway bound
// to the connection, guards the request (size, strict JSON, a "model"
// string, inline attachments counted and checked for media type and
// decoded size), picks the declared route whose model globs allow the
// model, reserves budget in the crossing.Authority (requests, estimated input
// tokens, the output cap, bytes, a stream slot), injects the route's
// credential, relays the answer — streams event by event, flushed
// as they arrive — while guarding it (size, well-formed events, redaction
// of every custodied value), settles the real usage and records one
// receipt. The answer waits for its receipt: a non-streamed body is sent
// only once the receipt commits, and a stream's terminal event is held
// until then; a receipt that cannot be recorded withholds them (the agent
// gets a 503-class error, or an error event ending the stream). Refusals
// are shaped as the provider's own errors so agents' SDKs report them
// plainly.
//
// Plane: unprivileged — it runs in the gateway process
// (internal/gateway/proc) and parses agent bytes; its trusted half, on
// the root side, is ./authority, reached over the model broker's own
// authority channel. Its wire messages are crossing's metered operations
// (crossing.Remote); its configuration is Config.
//
// It must never:
//   - forward an agent's credential: Authorization, x-api-key,
//     x-goog-api-key, Proxy-Authorization and Cookie are dropped with every
//     header not on a short allowlist, and every query parameter but
//     Anthropic's beta and Gemini's alt=sse (Gemini's ?key=); the route's
//     credential is added toward the route's upstream only (no redirect is
//     followed);
//   - forward a request it has not validated, or different bytes from the
//     ones it validated (the body is never re-serialized; the one edit is
//     the output cap below), or a body whose members it might read
//     differently from the provider (duplicate members it reads are
//     refused);
//   - give the provider work that reaches past the route: see below;
//   - execute a tool call: tool_use blocks, tool_calls and *_call items are
//     passed to the agent as data and listed as untrusted in the receipt;
//   - send a secret to the agent: custodied values, raw or JSON-escaped,
//     are redacted (by internal/custody's redactor) from every response
//     byte and allowed header, also when a value is split across reads; a header whose name holds one (in any
//     case: names are canonicalised) is dropped;
//   - relay a body it cannot read: it asks for identity encoding and
//     refuses a response in any other Content-Encoding;
//   - send a non-streamed answer, or a stream's terminal event, before the
//     call's receipt commits (docs/evidence-log.md), or release as unused
//     a reservation whose receipt could not be recorded;
//   - let a call through when identity, the authority or the credential is
//     unavailable (section 9: unavailable dependencies deny; there is no
//     direct-path fallback), or hold budget for a client that went away
//     (the upstream call follows the agent's request context and a stalled
//     writer times out).
//
// The provider is not a way out. The sandbox has no network route, so
// anything that makes the provider fetch, search, execute or read account
// data on the agent's behalf would be a channel to destinations nobody
// declared, carrying agent-chosen data in URLs and queries. So:
//
//   - attachments must be inline: a remote URL (Anthropic "url" sources,
//     OpenAI http(s) image URLs and screenshots, file_url) is refused —
//     image_url, file_url, server_url and url/file sources in any object,
//     whatever its type (image_generation's input_image_mask has none) — and
//     so is a provider file reference — a file_id or file_ids anywhere
//     the provider reads one (not in a JSON Schema or a tool_use block's
//     input), "file" sources, container_upload blocks — which could name
//     data the route's account holds for someone else;
//   - tools are allow-listed by type, per API: Anthropic client tools (no
//     type, or "custom") and the built-ins the agent executes (bash_*,
//     text_editor_*, computer_*, memory_*); OpenAI chat function and
//     custom tools; OpenAI Responses function, custom, local_shell,
//     computer_use_preview, apply_patch, shell, and image_generation
//     (server-side, but it fetches nothing). Every other type — web search
//     and fetch, code execution, file search, MCP toolsets and connectors,
//     tool search, types not known yet — is refused as a permission error
//     naming the type, as is an OpenAI tool_choice forcing one;
//   - so are the members that reach stored account data or server-side
//     execution: Anthropic mcp_servers and container (code-execution
//     containers, their files and skills), OpenAI web_search_options,
//     previous_response_id, conversation, a stored prompt ({"id": …}),
//     item_reference input items, background responses (generated after
//     the call, unseen), and the Responses shell tool in a hosted
//     environment; Gemini fileData/fileUri parts, cachedContent, and every
//     tool but functionDeclarations (googleSearch, codeExecution,
//     urlContext, …). docs/model-broker.md lists every member and why.
//
// Gemini (gemini.go) names the model in the path,
// /v1beta/models/{model}:{method}: it must be one plain segment, decoded
// once, from which the upstream URL is built; streams are carried as SSE
// (alt=sse) only; the output cap is generationConfig.maxOutputTokens.
//
// Budgets bound what the provider may generate, not what it was asked to:
// an OpenAI request without max_completion_tokens / max_tokens (chat) or
// max_output_tokens (Responses) could generate up to the model's maximum,
// and a chat stream without stream_options.include_usage never reports its
// usage. When a request sets no cap the broker sets one, the amount it
// reserves: Limits.DefaultMaxOutputTokens (4096 unless the config sets
// limits.default_max_output_tokens), added
// as "max_completion_tokens" / "max_output_tokens" right after the body's
// opening brace (or in place of a null) once the guard has verified the
// member absent; a chat stream that does not ask for usage gets
// "stream_options":{"include_usage":true}. These are the only bytes the
// broker adds; the receipt's digest and bytes-in are those of the agent's
// request, and its reason notes "output cap set by cordon: N". Caps must be
// integers from 1 to 10,000,000. Anthropic requests are forwarded as sent
// (the Messages API requires max_tokens and reports usage). A call whose
// output usage is unknown settles the whole reservation; usage reported
// above it settles as reported and is logged as a warning.
//
// Non-claims: redaction matches bytes, so a secret a model emitted token by
// token across several stream events is not caught (the broker never sends
// a credential to the model, so the model should not know one); a chat
// stream whose agent-set stream_options turns usage off settles at the
// reservation; the input-token estimate is len(body)/4, which overstates
// requests that carry attachments.
package model
