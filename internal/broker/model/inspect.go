package model

import (
	"bytes"
	"slices"
	"strings"

	"github.com/cordon-project/cordon/internal/custody"
)

// The response guard's reading of provider answers: usage for settlement,
// tool-use candidates for the receipt, the end of a stream. Tool calls are
// data to the broker: they pass through to the agent unexecuted and are
// listed in the receipt's Untrusted field.

// maxUntrusted bounds the tool candidates listed in one receipt.
const maxUntrusted = 64

// maxToolName bounds one candidate's name in a receipt.
const maxToolName = 128

// fields are the top-level members of a response or event the guard reads.
type fields struct {
	typ, message, usage, block, content, choices, errv, response, item, output []byte
	candidates, usageMeta, feedback                                            []byte // Gemini
}

// scanFields validates that b is one JSON object and captures its members of
// interest, in one pass.
func scanFields(b []byte) (fields, error) {
	var f fields
	s := jscan{b: b}
	if s.peek() != '{' {
		return f, errJSON
	}
	err := s.object(func(k []byte, esc bool) error {
		var dst *[]byte
		switch string(text(k, esc)) {
		case "type":
			dst = &f.typ
		case "message":
			dst = &f.message
		case "usage":
			dst = &f.usage
		case "content_block":
			dst = &f.block
		case "content":
			dst = &f.content
		case "choices":
			dst = &f.choices
		case "error":
			dst = &f.errv
		case "response":
			dst = &f.response
		case "item":
			dst = &f.item
		case "output":
			dst = &f.output
		case "candidates":
			dst = &f.candidates
		case "usageMetadata":
			dst = &f.usageMeta
		case "promptFeedback":
			dst = &f.feedback
		default:
			return s.skip()
		}
		v, err := s.value()
		*dst = v
		return err
	})
	if err == nil && !s.end() {
		err = errJSON
	}
	return f, err
}

// inspectBody reads a complete (non-streamed) successful response.
func (x *exchange) inspectBody(data []byte) error {
	f, err := scanFields(data)
	if err != nil || x.ep.count {
		return err
	}
	switch {
	case x.api == apiGemini:
		x.geminiChunk(&f, true)
	case x.api == apiAnthropic:
		x.tokens(f.usage, anthropicIn, anthropicOut, true)
		each(f.content, x.anthropicBlock)
	case x.ep.resp:
		x.tokens(f.usage, responsesIn, responsesOut, true)
		each(f.output, x.responsesItem)
	default:
		x.tokens(f.usage, chatIn, chatOut, true)
		each(f.choices, func(c []byte) { x.chatTools(dig(c, "message")) })
	}
	return nil
}

// inspectEvent reads one stream event; an error means the stream is
// malformed. Events without data (comments, keep-alives) pass unread.
func (x *exchange) inspectEvent(ev *sseEvent) error {
	d := ev.data
	if d == nil {
		return nil
	}
	if x.api == apiOpenAI && !x.ep.resp && string(d) == "[DONE]" {
		x.done = true
		return nil
	}
	f, err := scanFields(d)
	if err != nil {
		return err
	}
	typ, _ := strValue(f.typ)
	switch {
	case x.api == apiGemini:
		x.geminiChunk(&f, false)
	case x.api == apiAnthropic:
		switch string(typ) {
		case "message_start":
			x.tokens(dig(f.message, "usage"), anthropicIn, nil, false)
		case "message_delta":
			// Cumulative: output_tokens here is the call's total.
			x.tokens(f.usage, anthropicIn, anthropicOut, true)
		case "content_block_start":
			x.anthropicBlock(f.block)
		case "message_stop", "error":
			x.done = true
		}
	case x.ep.resp:
		switch string(typ) {
		case "response.completed", "response.incomplete", "response.failed":
			x.tokens(dig(f.response, "usage"), responsesIn, responsesOut, true)
			x.done = true
		case "response.output_item.added":
			x.responsesItem(f.item)
		case "error":
			x.done = true
		}
	default:
		if len(f.errv) > 0 && string(f.errv) != "null" {
			x.done = true // the provider ended the stream with an error
		}
		x.tokens(f.usage, chatIn, chatOut, true)
		each(f.choices, func(c []byte) { x.chatTools(dig(c, "delta")) })
	}
	return nil
}

// Input-token members of each API's usage object; Anthropic reports cache
// reads and writes apart from input_tokens, and all of them are input.
var (
	anthropicIn = []string{"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"}
	chatIn      = []string{"prompt_tokens"}
	responsesIn = []string{"input_tokens"}
	geminiIn    = []string{"promptTokenCount", "toolUsePromptTokenCount"}
)

// Output-token members: Gemini reports the model's thoughts apart from the
// candidates, and both are output (summed).
var (
	anthropicOut = []string{"output_tokens"}
	chatOut      = []string{"completion_tokens"}
	responsesOut = []string{"output_tokens"}
	geminiOut    = []string{"candidatesTokenCount", "thoughtsTokenCount"}
)

// tokens reads a usage object. Output is taken only when final (a stream's
// first usage is not its last); input never decreases (a later, cumulative
// report may omit the cache members an earlier one had).
func (x *exchange) tokens(u []byte, inKeys, outKeys []string, final bool) {
	if len(u) == 0 || u[0] != '{' {
		return
	}
	var in, out int64
	var hasIn, hasOut bool
	s := jscan{b: u}
	_ = s.object(func(k []byte, esc bool) error {
		name := string(text(k, esc))
		isIn, isOut := slices.Contains(inKeys, name), slices.Contains(outKeys, name)
		if !isIn && !isOut {
			return s.skip()
		}
		v, err := s.value()
		if n, ok := uintValue(v); ok {
			if isIn {
				in, hasIn = addUsage(in, n), true
			} else {
				out, hasOut = addUsage(out, n), true
			}
		}
		return err
	})
	if hasIn {
		x.usage.in, x.usage.inKnown = max(x.usage.in, in), true
	}
	if hasOut && final {
		x.usage.out, x.usage.outKnown = out, true
	}
}

// maxSettle bounds a token count the broker settles: the store refuses a
// settlement above it (store.MaxAmount), and with it the crossing's
// receipt. A provider's usage is untrusted text: counts repeated until
// their sum wraps int64, or one count past the bound, settle the bound.
const maxSettle = 1 << 50

// addUsage adds two non-negative counts, saturating at maxSettle.
func addUsage(a, b int64) int64 {
	if b >= maxSettle-a {
		return maxSettle
	}
	return a + b
}

// anthropicBlock lists a tool-use content block (client or server tool).
func (x *exchange) anthropicBlock(block []byte) {
	f, err := scanFields(block)
	if err != nil {
		return
	}
	switch typ, _ := strValue(f.typ); string(typ) {
	case "tool_use", "server_tool_use", "mcp_tool_use":
		name, _ := strValue(dig(block, "name"))
		x.tool(typ, name)
	}
}

// chatTools lists the tool calls of a chat message or stream delta; in a
// stream a call's name arrives once, in its first delta.
func (x *exchange) chatTools(msg []byte) {
	if len(msg) == 0 || msg[0] != '{' {
		return
	}
	each(dig(msg, "tool_calls"), func(tc []byte) {
		if name, ok := strValue(dig(tc, "function", "name")); ok {
			x.tool([]byte("function"), name)
		}
	})
	if name, ok := strValue(dig(msg, "function_call", "name")); ok {
		x.tool([]byte("function_call"), name)
	}
}

// responsesItem lists a Responses output item that is a tool call
// (function_call, custom_tool_call, local_shell_call, computer_call, …).
func (x *exchange) responsesItem(item []byte) {
	f, err := scanFields(item)
	if err != nil {
		return
	}
	typ, _ := strValue(f.typ)
	if !bytes.HasSuffix(typ, []byte("_call")) {
		return
	}
	name, _ := strValue(dig(item, "name"))
	x.tool(typ, name)
}

// tool adds a candidate to the receipt as "tool_use:NAME" (the kind when the
// provider gave no name). Names are bounded, printable and never a secret.
func (x *exchange) tool(kind, name []byte) {
	if len(x.untrusted) >= maxUntrusted {
		return
	}
	label := name
	if len(label) == 0 {
		label = kind
	}
	if x.m.Contains(label) {
		label = []byte(custody.Replacement)
	}
	if len(label) > maxToolName {
		label = label[:maxToolName]
	}
	var sb strings.Builder
	sb.Grow(len("tool_use:") + len(label))
	sb.WriteString("tool_use:")
	for _, c := range label {
		if c <= ' ' || c >= 0x7f {
			c = '?'
		}
		sb.WriteByte(c)
	}
	x.untrusted = append(x.untrusted, sb.String())
}
