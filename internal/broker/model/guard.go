package model

import (
	"bytes"
	"fmt"
	"path"
	"slices"
)

// reqInfo is what the request guard learned from a body. The guard reads,
// it never rewrites; the only change the broker makes to a body is the
// output cap it adds to an OpenAI request that set none (see capEdits), at
// offsets the guard recorded here.
type reqInfo struct {
	model       []byte // decoded "model"
	stream      bool
	maxOut      int64 // largest of max_tokens / max_completion_tokens / max_output_tokens; -1 when none
	choices     int64 // OpenAI "n"; 1 when absent
	attachments int
	top         uint32 // top-level members present, null or not (t* bits)
	caps        uint32 // output-limit members present with a number (t* bits)
	open        int    // offset just past the body's opening '{'
	// Offsets of a null value of the members the broker may set; 0 when
	// the member is absent or not null.
	nullCompletion, nullOutput, nullStreamOptions int
	// Gemini: offset just past generationConfig's '{' and whether it has
	// members; offset of a null generationConfig.
	genOpen, genNull int
	genMembers       bool
}

// maxOutputCap bounds an output limit: the reservation is the limit times
// "n", and a cap beyond any model's output is a typo or an attempt to
// hold the whole budget.
const maxOutputCap = 10_000_000

// maxChoices bounds OpenAI's "n": the output reservation is multiplied by it.
const maxChoices = 128

// maxModelLen bounds the model id (it goes into receipts and logs).
const maxModelLen = 256

// Members the guard reads, as bits for duplicate detection: a body that
// names one twice could mean one thing to the broker and another to the
// provider (most parsers keep the last), so it is refused.
const (
	mType uint16 = 1 << iota
	mMediaType
	mData
	mURL
	mFileData
	mFileID
	mFileURL
	mFormat
	mServerURL
	mSource
	mImageURL
	mFile
	mInputAudio
	mFileIDs
	mEnvironment
)

// Top-level members the guard reads, for the same duplicate check.
const (
	tModel uint32 = 1 << iota
	tStream
	tN
	tMaxTokens
	tMaxCompletionTokens
	tMaxOutputTokens
	tStreamOptions
	tTools
	tToolChoice
	tMCPServers
	tWebSearchOptions
	tPreviousResponseID
	tConversation
	tPrompt
	tContainer
	tBackground
)

var topMembers = map[string]uint32{
	"model": tModel, "stream": tStream, "n": tN,
	"max_tokens": tMaxTokens, "max_completion_tokens": tMaxCompletionTokens, "max_output_tokens": tMaxOutputTokens,
	"stream_options": tStreamOptions, "tools": tTools, "tool_choice": tToolChoice, "mcp_servers": tMCPServers,
	"web_search_options": tWebSearchOptions, "previous_response_id": tPreviousResponseID,
	"conversation": tConversation, "prompt": tPrompt, "container": tContainer,
	"background": tBackground,
}

var members = map[string]uint16{
	"type": mType, "media_type": mMediaType, "data": mData, "url": mURL,
	"file_data": mFileData, "file_id": mFileID, "file_url": mFileURL, "format": mFormat,
	"server_url": mServerURL, "source": mSource, "image_url": mImageURL, "file": mFile,
	"input_audio": mInputAudio, "file_ids": mFileIDs, "environment": mEnvironment,
}

// leaf holds the string members of one object that the guard looks at.
type leaf struct {
	typ, mediaType, data, url, fileData, fileID, fileURL, format []byte
	seen                                                         uint16
	typNull                                                      bool   // "type": null
	envType                                                      []byte // a tool's "environment": {"type": …}; nil when absent or not an object
}

// node is one object of the body: its own strings and the few child objects
// that describe an attachment (Anthropic "source", OpenAI "image_url",
// "file", "input_audio").
type node struct {
	leaf
	imageURL                         []byte // "image_url" given as a string (Responses input_image)
	source, imageURLObj, file, audio leaf
	env                              leaf // a tool's "environment" object (Responses shell)
	// otherURL: the refusal of the first member named like a URL
	// ("*_url") that the guard does not read otherwise and whose string
	// is not a data: URL.
	otherURL *refusal
}

type guard struct {
	lim  *Limits
	ep   *endpoint
	info reqInfo
	// fileRefs counts provider file references (file_id, file_ids) found
	// where the provider would read them; opaque > 0 while walking a JSON
	// Schema, whose property names are not references.
	fileRefs, opaque int
	// inInput > 0 while walking an object's "input" member; references
	// found there are pending until the object's type says whether
	// "input" is a tool call's arguments — the model's own output — or
	// not. Whatever is still pending at the end refuses the request.
	inInput int
	pending []error
}

// guardRequest checks a request body for endpoint ep against the limits and
// returns what the broker needs to route and budget it. Refusals are
// kindInvalid, kindForbidden or kindTooLarge.
func guardRequest(body []byte, lim *Limits, ep *endpoint) (reqInfo, *refusal) {
	if ep != nil && ep.api == apiGemini {
		return guardGemini(body, lim, ep, nil)
	}
	g := guard{lim: lim, ep: ep, info: reqInfo{maxOut: -1, choices: 1}}
	s := jscan{b: body}
	if s.peek() != '{' {
		return g.info, refuse(kindInvalid, "request body must be a JSON object")
	}
	g.info.open = s.i + 1
	err := s.object(func(k []byte, esc bool) error {
		name := text(k, esc)
		if bit := topMembers[string(name)]; bit != 0 {
			if g.info.top&bit != 0 {
				return refuse(kindInvalid, "duplicate member "+quoteForMessage(name))
			}
			g.info.top |= bit
		}
		return g.member(&s, name)
	})
	if err != nil {
		if r, ok := err.(*refusal); ok {
			return g.info, r
		}
		return g.info, refuse(kindInvalid, "request body is not valid JSON: "+err.Error())
	}
	if !s.end() {
		return g.info, refuse(kindInvalid, "request body is not valid JSON: data after the object")
	}
	if g.fileRefs > 0 {
		return g.info, errFileRef
	}
	if len(g.pending) > 0 {
		if r, ok := g.pending[0].(*refusal); ok {
			return g.info, r
		}
		return g.info, errRemote
	}
	switch m := g.info.model; {
	case g.info.top&tModel == 0:
		return g.info, refuse(kindInvalid, `"model" is required`)
	case !validModelID(m):
		return g.info, refuse(kindInvalid, `"model" must be a model id`)
	}
	return g.info, nil
}

// maxTokens reads one of the output-limit members; duplicates of the same
// name are refused.
func (g *guard) maxTokens(s *jscan, name []byte) error {
	if s.peek() == 'n' {
		switch string(name) {
		case "max_completion_tokens":
			g.info.nullCompletion = s.i
		case "max_output_tokens":
			g.info.nullOutput = s.i
		}
		return s.literal("null")
	}
	raw, err := s.number()
	if err != nil {
		return err
	}
	n, ok := uintValue(raw)
	if !ok || n < 1 || n > maxOutputCap {
		return refuse(kindInvalid, fmt.Sprintf("%s must be an integer from 1 to %d", quoteForMessage(name), maxOutputCap))
	}
	g.info.caps |= topMembers[string(name)]
	if n > g.info.maxOut {
		g.info.maxOut = n
	}
	return nil
}

// tools checks every tool declaration against the endpoint's allow-list.
func (g *guard) tools(s *jscan) error {
	return eachTool(s, func() error {
		start := s.i
		l, err := g.object(s)
		if err != nil {
			return err
		}
		if g.ep != nil && g.ep.resp && !l.typNull && string(l.typ) == "namespace" && l.envType == nil {
			return g.namespace(s.b[start:s.i])
		}
		return g.toolAllowed(l)
	})
}

// eachTool calls fn on each member of a "tools" value (null, or an array
// of objects; anything else is refused), with s at the member's '{'. The
// one shape every API's tools take.
func eachTool(s *jscan, fn func() error) error {
	switch s.peek() {
	case 'n':
		return s.literal("null")
	case '[':
	default:
		return refuse(kindInvalid, `"tools" must be an array`)
	}
	return s.array(func() error {
		if s.peek() != '{' {
			return refuse(kindInvalid, `every member of "tools" must be an object`)
		}
		return fn()
	})
}

// namespaceTools are the tool types a Responses "namespace" may group:
// client tools the agent runs itself. Nothing else nests, not even the
// client built-ins allowed at the top level (the API groups functions).
var namespaceTools = []string{"function", "custom"}

// namespace checks a Responses "namespace" tool, obj (already walked by
// object, which counted its references): a named group of tools, as
// Codex CLI declares its own (mcp__codex_tui). It is a client tool only
// when every tool in its one "tools" array is a function or custom tool;
// a hosted tool nested in it (web_search, file_search, mcp,
// code_interpreter, computer use, image generation), another namespace
// or a type not known refuses it, as at the top level.
func (g *guard) namespace(obj []byte) error {
	s := jscan{b: obj}
	n := 0
	err := s.object(func(k []byte, esc bool) error {
		if string(text(k, esc)) != "tools" {
			return s.skip()
		}
		if n++; n > 1 {
			return refuse(kindInvalid, `duplicate member "tools" in a namespace tool`)
		}
		if s.peek() != '[' {
			return refuse(kindInvalid, `a namespace tool's "tools" must be an array`)
		}
		return s.array(func() error {
			if s.peek() != '{' {
				return refuse(kindInvalid, `every member of a namespace tool's "tools" must be an object`)
			}
			sub := guard{lim: g.lim, ep: g.ep} // its references were counted by the first walk
			l, err := sub.object(&s)
			if err != nil {
				return err
			}
			if l.seen&mType != 0 && !l.typNull && l.typ != nil && l.envType == nil && slices.Contains(namespaceTools, string(l.typ)) {
				return nil
			}
			name := "(none)"
			if l.typ != nil {
				name = quoteForMessage(l.typ)
			}
			return refuse(kindForbidden, "tool type "+name+" in a namespace is not allowed: "+serverSideRule)
		})
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return refuse(kindInvalid, `a namespace tool needs a "tools" array`)
	}
	return nil
}

// toolChoice checks an OpenAI tool_choice object: a hosted tool it forces
// must be one the allow-list admits (the provider also requires it among
// the tools). Anthropic's choices name a tool of the checked list.
func (g *guard) toolChoice(s *jscan) error {
	if g.ep == nil || g.ep.api == apiAnthropic || s.peek() != '{' {
		return g.walk(s)
	}
	l, err := g.object(s)
	if err != nil || string(l.typ) == "allowed_tools" {
		return err // allowed_tools picks among the declared, checked tools
	}
	return g.toolAllowed(l)
}

// toolAllowed admits a tool whose type the endpoint's allow-list names:
// tools the agent itself executes, and server-side tools that reach
// nothing. Everything else — provider-side web search and fetch, code
// execution, file search, MCP connectors, tools not known yet — is
// refused.
func (g *guard) toolAllowed(l leaf) error {
	absent := l.seen&mType == 0 || l.typNull
	if !absent && l.typ == nil {
		return refuse(kindInvalid, `a tool's "type" must be a string`)
	}
	if toolTypeAllowed(g.ep, l.typ, absent) {
		if l.envType != nil && string(l.envType) != "local" {
			// The Responses shell tool with a hosted environment
			// (container_auto, container_reference) runs commands, with
			// network and skills, in a container at the provider.
			return refuse(kindForbidden, "tool environment "+quoteForMessage(l.envType)+" is not allowed: "+serverSideRule)
		}
		return nil
	}
	name := "(none)"
	if !absent {
		name = quoteForMessage(l.typ)
	}
	return refuse(kindForbidden, "tool type "+name+" is not allowed: "+serverSideRule)
}

const serverSideRule = "server-side tools that fetch, search, execute or reach account data are not allowed through cordon; declare client tools, which the agent executes"

// Tool types admitted per API. Anthropic client tools carry no type (or
// "custom"); bash, text editor, computer and memory are versioned
// built-ins the agent executes. OpenAI's are function and custom tools,
// and in the Responses API the built-ins the agent executes plus image
// generation, which runs at the provider but fetches nothing.
var (
	anthropicToolPrefixes = []string{"bash_", "text_editor_", "computer_", "memory_"}
	chatTools             = []string{"function", "custom"}
	responsesTools        = []string{"function", "custom", "local_shell", "computer_use_preview", "apply_patch", "shell", "image_generation"}
)

func toolTypeAllowed(ep *endpoint, typ []byte, absent bool) bool {
	switch {
	case ep == nil:
		return false
	case ep.api == apiAnthropic:
		if absent || string(typ) == "custom" {
			return true
		}
		for _, p := range anthropicToolPrefixes {
			if len(typ) > len(p) && string(typ[:len(p)]) == p {
				return true
			}
		}
		return false
	case absent:
		return false
	}
	list := chatTools
	if ep.resp {
		list = responsesTools
	}
	for _, t := range list {
		if string(typ) == t {
			return true
		}
	}
	return false
}

func refuseServerSide(name []byte) *refusal {
	return refuse(kindForbidden, quoteForMessage(name)+" is not allowed: "+serverSideRule)
}

// walk consumes any value, inspecting every object in it.
func (g *guard) walk(s *jscan) error {
	switch s.peek() {
	case '{':
		_, err := g.object(s)
		return err
	case '[':
		return s.array(func() error { return g.walk(s) })
	}
	return s.skip()
}

// object walks one object, classifies it, and returns its members of interest
// so a parent can read its "source" or "image_url".
func (g *guard) object(s *jscan) (leaf, error) {
	var n node
	inputRefs := 0      // file references inside this object's "input"
	var inputs [][2]int // ranges of g.pending added while walking its "input"
	err := s.object(func(k []byte, esc bool) error {
		name := text(k, esc)
		bit := members[string(name)]
		if bit == 0 {
			switch string(name) {
			case "input_schema", "parameters", "schema":
				// A JSON Schema: a property may be called file_id.
				g.opaque++
				err := g.walk(s)
				g.opaque--
				return err
			case "input":
				// A tool_use block's arguments are the model's own
				// output, not references the provider resolves.
				before, from := g.fileRefs, len(g.pending)
				g.inInput++
				err := g.walk(s)
				g.inInput--
				inputRefs += g.fileRefs - before
				inputs = append(inputs, [2]int{from, len(g.pending)})
				return err
			}
			if urlMember(name) && s.peek() == '"' {
				var u []byte
				if err := g.str(s, &u, true); err != nil {
					return err
				}
				if n.otherURL == nil {
					n.otherURL = notInline(u)
				}
				return nil
			}
			return g.walk(s)
		}
		if n.seen&bit != 0 {
			return refuse(kindInvalid, "duplicate member "+quoteForMessage(name))
		}
		n.seen |= bit
		return g.known(s, &n, bit)
	})
	if err != nil {
		return leaf{}, err
	}
	if string(n.typ) == "tool_use" {
		g.fileRefs -= inputRefs
	}
	switch string(n.typ) {
	case "tool_use", "server_tool_use", "mcp_tool_use":
		for k := len(inputs) - 1; k >= 0; k-- {
			r := inputs[k]
			g.pending = append(g.pending[:r[0]], g.pending[r[1]:]...)
		}
	}
	if n.env.seen&mType != 0 {
		n.envType = n.env.typ
		if n.envType == nil {
			n.envType = []byte{} // a type that is not a string names no known environment
		}
	}
	return n.leaf, g.classify(&n)
}

// str reads a string member into *dst (decoded when decode is set and it has
// escapes; raw otherwise, whose length only over-counts). Non-strings are
// walked and leave *dst nil: a JSON Schema "type" may be an array.
func (g *guard) str(s *jscan, dst *[]byte, decode bool) error {
	if s.peek() != '"' {
		return g.walk(s)
	}
	raw, esc, err := s.str()
	if err != nil {
		return err
	}
	if decode {
		raw = text(raw, esc)
	}
	if raw == nil {
		raw = []byte{}
	}
	*dst = raw
	return nil
}

// child reads an object member into *dst; anything else is walked.
func (g *guard) child(s *jscan, dst *leaf) error {
	if s.peek() != '{' {
		return g.walk(s)
	}
	l, err := g.object(s)
	*dst = l
	return err
}

var (
	errRemote  = refuse(kindForbidden, "attachments must be inline (base64 or data: URL): a remote URL would make the provider fetch a destination nobody declared")
	errByRef   = refuse(kindForbidden, "attachments must be inline (base64 or data: URL): provider file references are not allowed")
	errMCP     = refuse(kindForbidden, "remote MCP servers are not allowed: tools are reached through the cordon tool broker")
	errFileRef = refuse(kindForbidden, "provider file references (file_id) are not allowed: they could name data the route's account holds for someone else; send content inline")
	errItemRef = refuse(kindForbidden, "item references are not allowed: they name data stored in the provider account; send the items inline")
)

// classify recognises an attachment by its shape (type plus payload member)
// and checks it; then, whatever the object's type, any member left that
// the provider would fetch or resolve is checked too (see anyReference):
// a fetch must not depend on the guard knowing the object's type.
func (g *guard) classify(n *node) error {
	consumed, err := g.typed(n)
	if err != nil {
		return err
	}
	// A typed shape's payload was checked; its other members still are:
	// one inline member must not vouch for the rest of the object.
	if err := g.anyReference(n, consumed); err != nil {
		if g.inInput == 0 {
			return err
		}
		g.pending = append(g.pending, err)
	}
	return nil
}

// typed checks the attachment shapes the guard knows by type; consumed
// reports that the object's payload was checked (and counted) here.
func (g *guard) typed(n *node) (bool, error) {
	switch string(n.typ) {
	case "image", "document": // Anthropic content blocks
		src := n.source
		if src.seen == 0 {
			return false, nil
		}
		switch string(src.typ) {
		case "base64":
			return true, g.inline(src.mediaType, b64Len(len(src.data)))
		case "text":
			mt := src.mediaType
			if mt == nil {
				mt = []byte("text/plain")
			}
			return true, g.inline(mt, int64(len(src.data)))
		case "content":
			return true, nil // nested blocks were walked and checked themselves
		case "url":
			return true, errRemote
		case "file":
			return true, errByRef
		}
		return true, refuse(kindInvalid, "unsupported attachment source type "+quoteForMessage(src.typ))
	case "image_url": // OpenAI chat
		if n.imageURLObj.url != nil {
			return true, g.dataURL(n.imageURLObj.url)
		}
		if n.imageURL != nil {
			return true, g.dataURL(n.imageURL)
		}
	case "input_image", "computer_screenshot": // OpenAI Responses
		if n.fileID != nil {
			return true, errByRef
		}
		if n.imageURL != nil {
			return true, g.dataURL(n.imageURL)
		}
	case "file": // OpenAI chat
		if n.file.fileID != nil {
			return true, errByRef
		}
		if n.file.fileData != nil {
			return true, g.fileData(n.file.fileData)
		}
	case "input_file": // OpenAI Responses
		if n.fileID != nil {
			return true, errByRef
		}
		if n.fileURL != nil {
			return true, errRemote
		}
		if n.fileData != nil {
			return true, g.fileData(n.fileData)
		}
	case "input_audio": // OpenAI chat
		if n.audio.data != nil {
			return true, g.inline(append([]byte("audio/"), n.audio.format...), b64Len(len(n.audio.data)))
		}
	case "mcp": // OpenAI Responses remote MCP tool
		if n.seen&mServerURL != 0 {
			return true, errMCP
		}
	case "item_reference": // OpenAI Responses: an item stored in the account
		if g.ep != nil && g.ep.resp {
			return true, errItemRef
		}
	}
	return false, nil
}

// anyReference checks, in an object of any type (or none), the members
// whose value the provider fetches or resolves, wherever they appear: an
// "image_url" (a string, or an object's "url") must be an inline data:
// URL, as for an input image — image_generation's input_image_mask is
// {"image_url": …} with no type of its own —, a "file_url" is remote, a
// "server_url" is a remote MCP server, and a "source" of type "url" or
// "file" is a remote or stored attachment; so is any other "*_url" member
// (but "current_url") or an object's "url" that is not a data: URL, which
// OpenAI-compatible upstreams fetch. Every member is checked, not the first
// found; counted says typed() already checked and counted the object's
// image_url. Not inside a JSON Schema, whose property names are not
// references, nor in a tool_use block's input.
func (g *guard) anyReference(n *node, counted bool) error {
	if g.opaque > 0 {
		return nil
	}
	if !counted {
		// Each check below that passes falls through to the next: every
		// member of the object is checked, not the first one found.
		var err error
		switch {
		case n.imageURL != nil:
			err = g.dataURL(n.imageURL)
		case n.imageURLObj.url != nil:
			err = g.dataURL(n.imageURLObj.url)
		}
		if err != nil {
			return err
		}
	}
	switch {
	case n.fileURL != nil, n.file.fileURL != nil, n.imageURLObj.fileURL != nil:
		return errRemote
	case n.seen&mServerURL != 0:
		return errMCP
	case n.otherURL != nil:
		// OpenAI-compatible upstreams (vLLM, gateways: a route's upstream
		// is any URL) fetch "video_url", "audio_url", "document_url", an
		// object's "url", … beyond the providers' own schemas.
		return n.otherURL
	case n.url != nil && notInline(n.url) != nil:
		return notInline(n.url)
	case string(n.source.typ) == "url", n.source.url != nil:
		return errRemote
	case string(n.source.typ) == "file":
		return errByRef
	}
	return nil
}

// urlMember reports whether a member the guard does not read otherwise is
// named like a URL: "url" is read as a leaf; any "*_url" but
// computer_call_output's "current_url" (the page a computer-use agent is
// on, for the provider's safety checks, never fetched).
func urlMember(name []byte) bool {
	return bytes.HasSuffix(name, []byte("_url")) && string(name) != "current_url"
}

// notInline refuses a URL that is not an inline data: URL, as dataURL
// does, without counting it as an attachment.
func notInline(u []byte) *refusal {
	switch {
	case hasPrefixFold(u, "data:"):
		return nil
	case hasPrefixFold(u, "http:") || hasPrefixFold(u, "https:"):
		return errRemote
	}
	return refuse(kindInvalid, "unsupported attachment URL: use a data: URL")
}

// fileData checks an OpenAI file payload: a data: URL, or bare base64 of an
// unknown type.
func (g *guard) fileData(b []byte) error {
	if hasPrefixFold(b, "data:") {
		return g.dataURL(b)
	}
	return g.inline([]byte("application/octet-stream"), b64Len(len(b)))
}

// dataURL checks an inline data: URL; any other URL is remote.
func (g *guard) dataURL(u []byte) error {
	if !hasPrefixFold(u, "data:") {
		if hasPrefixFold(u, "http:") || hasPrefixFold(u, "https:") {
			return errRemote
		}
		return refuse(kindInvalid, "unsupported attachment URL: use a data: URL")
	}
	meta, payload, ok := bytes.Cut(u[len("data:"):], []byte(","))
	if !ok {
		return refuse(kindInvalid, "malformed data: URL")
	}
	mt, params, _ := bytes.Cut(meta, []byte(";"))
	if len(mt) == 0 {
		mt = []byte("text/plain")
	}
	size := int64(len(payload))
	if bytes.HasSuffix(params, []byte("base64")) {
		size = b64Len(len(payload))
	}
	return g.inline(mt, size)
}

// inline counts and checks one inline attachment.
func (g *guard) inline(mediaType []byte, size int64) error {
	g.info.attachments++
	if g.info.attachments > g.lim.MaxAttachments {
		return refuse(kindInvalid, fmt.Sprintf("too many attachments: at most %d are allowed", g.lim.MaxAttachments))
	}
	if size > g.lim.MaxAttachmentBytes {
		return refuse(kindTooLarge, fmt.Sprintf("attachment exceeds %d bytes", g.lim.MaxAttachmentBytes))
	}
	if !mimeAllowed(g.lim.AllowedMIME, mediaType) {
		return refuse(kindInvalid, "attachment media type "+quoteForMessage(mediaType)+" is not allowed")
	}
	return nil
}

// mimeAllowed matches a media type (parameters dropped, case folded)
// against the allowed globs ("image/png", "image/*"). No globs allow nothing.
func mimeAllowed(globs []string, mt []byte) bool {
	mt, _, _ = bytes.Cut(mt, []byte(";"))
	mt = bytes.TrimSpace(mt)
	if len(mt) == 0 || len(mt) > 127 {
		return false
	}
	var buf [127]byte
	low := buf[:len(mt)]
	for i, c := range mt {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		low[i] = c
	}
	name := string(low)
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// b64Len bounds the decoded size of n base64 characters from above.
func b64Len(n int) int64 { return (int64(n)*3 + 3) / 4 }

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && bytes.EqualFold(b[:len(prefix)], []byte(prefix))
}
