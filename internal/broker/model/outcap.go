package model

import (
	"slices"
	"strconv"
)

// The output cap. A budget reservation is only a bound if the provider
// enforces it: an OpenAI request without max_completion_tokens /
// max_output_tokens may generate up to the model's maximum, and a chat
// stream without stream_options.include_usage never reports what it
// generated. So when an OpenAI request sets no cap, the broker sets one —
// Limits.DefaultMaxOutputTokens, the amount it reserves — and asks a chat
// stream to report its usage. These are the only changes it ever makes to
// a body: inserted right after the opening '{', or replacing a null the
// guard found, at offsets the guard recorded while validating the very
// bytes that are forwarded. The receipt's digest stays the digest of what
// the agent sent.

// edit replaces cut bytes at offset at with ins.
type edit struct {
	at, cut int
	ins     []byte
}

// capPlan is what the broker adds to one request.
type capPlan struct {
	cap   int64 // the output cap the broker set; 0 when the agent set one
	usage bool  // stream_options.include_usage requested by the broker
	edits [3]edit
	n     int
}

// includeUsage is the stream_options the broker sets on a chat stream.
const includeUsage = `{"include_usage":true}`

// capEdits plans the changes to a guarded body for endpoint ep: a cap of
// max output tokens when the request sets none, and usage reporting for a
// chat stream that does not ask for it. Anthropic requests are never
// changed (the Messages API requires max_tokens and always reports usage).
func capEdits(info *reqInfo, ep *endpoint, max int64) capPlan {
	var p capPlan
	if ep.api == apiGemini {
		return geminiCapEdits(info, ep, max)
	}
	if ep.api != apiOpenAI {
		return p
	}
	// The member the provider enforces, whether the request has a
	// numeric cap, whether the member is present (then its value is
	// null: the guard refuses anything but null or a number).
	member, bit, nullAt := "max_completion_tokens", tMaxCompletionTokens, info.nullCompletion
	capped := info.caps&(tMaxTokens|tMaxCompletionTokens) != 0
	if ep.resp {
		member, bit, nullAt = "max_output_tokens", tMaxOutputTokens, info.nullOutput
		capped = info.caps&tMaxOutputTokens != 0
	}
	var ins []byte
	if !capped {
		p.cap = max
		num := strconv.AppendInt(nil, max, 10)
		if info.top&bit == 0 {
			ins = append(append(append(append(ins, '"'), member...), `":`...), num...)
			ins = append(ins, ',')
		} else {
			p.add(edit{at: nullAt, cut: len("null"), ins: num})
		}
	}
	if !ep.resp && info.stream {
		switch {
		case info.top&tStreamOptions == 0:
			ins = append(ins, `"stream_options":`+includeUsage+`,`...)
			p.usage = true
		case info.nullStreamOptions > 0:
			p.add(edit{at: info.nullStreamOptions, cut: len("null"), ins: []byte(includeUsage)})
			p.usage = true
		}
		// Present without include_usage: left as the agent sent it;
		// without a usage report the call settles at the reservation.
	}
	if len(ins) > 0 {
		p.add(edit{at: info.open, ins: ins})
	}
	slices.SortFunc(p.edits[:p.n], func(a, b edit) int { return a.at - b.at })
	return p
}

func (p *capPlan) add(e edit) {
	p.edits[p.n] = e
	p.n++
}

// segments appends the pieces of the forwarded body to dst: body cut
// around the edits, with their insertions between.
func (p *capPlan) segments(body []byte, dst [][]byte) [][]byte {
	last := 0
	for _, e := range p.edits[:p.n] {
		dst = append(dst, body[last:e.at], e.ins)
		last = e.at + e.cut
	}
	return append(dst, body[last:])
}

// grow is how many bytes the edits add to the body.
func (p *capPlan) grow() int {
	n := 0
	for _, e := range p.edits[:p.n] {
		n += len(e.ins) - e.cut
	}
	return n
}
