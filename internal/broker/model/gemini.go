package model

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// The Gemini API (generativelanguage.googleapis.com, v1beta): the model is
// named by the request path, /v1beta/models/{model}:{method}, not by the
// body; the body is a GenerateContentRequest whose members Google's JSON
// parser accepts in lowerCamelCase and in snake_case alike, so every
// member name the guard reads is canonicalised (snake_case to camelCase)
// before it is compared, and a body naming one member in both spellings
// is refused as a duplicate.

// geminiPrefix is the path of every Gemini operation the broker carries.
const geminiPrefix = "/v1beta/models/"

// geminiOp returns the Gemini endpoint a POST to escaped path p asks for
// (the method after the last ':'); nil when there is none.
func geminiOp(p string) *endpoint {
	if len(p) <= len(geminiPrefix) || p[:len(geminiPrefix)] != geminiPrefix {
		return nil
	}
	rest := p[len(geminiPrefix):]
	for i := len(rest) - 1; i >= 0; i-- {
		if rest[i] == ':' {
			for j := range endpoints {
				if ep := &endpoints[j]; ep.api == apiGemini && ep.method == rest[i+1:] {
					return ep
				}
			}
			return nil
		}
	}
	return nil
}

// geminiModel returns the model id of a Gemini request path: the one path
// segment between /v1beta/models/ and the method, percent-decoded once.
// The decoded id must be made of letters, digits, '.', '-' and '_', not
// start with '.' and hold no "..": the upstream URL is built from it, so
// nothing in it may add a segment, a query or a second round of decoding.
func geminiModel(escaped string) ([]byte, *refusal) {
	rest := escaped[len(geminiPrefix):]
	colon := -1
	for i := len(rest) - 1; i >= 0; i-- {
		if rest[i] == ':' {
			colon = i
			break
		}
	}
	if colon <= 0 {
		return nil, refuse(kindInvalid, "the request path must be /v1beta/models/{model}:{method}")
	}
	seg, err := url.PathUnescape(rest[:colon])
	if err != nil || !geminiModelID(seg) {
		return nil, refuse(kindInvalid, "the model in the request path must be one path segment of letters, digits, '.', '-' and '_' (percent-encoding is decoded once; '/', '..' and other characters are refused)")
	}
	return []byte(seg), nil
}

func geminiModelID(m string) bool {
	if m == "" || len(m) > maxModelLen || m[0] == '.' {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
		case c == '.':
			if i+1 < len(m) && m[i+1] == '.' {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// geminiQuery checks the query of a Gemini request: "key" (the agent's
// placeholder credential) is dropped with every other parameter, and a
// stream must ask for server-sent events. The JSON-array stream Gemini
// sends without alt=sse is not carried: the broker guards streams event by
// event, and an array is one value that would have to be read whole.
func geminiQuery(r *http.Request, ep *endpoint) *refusal {
	if !ep.stream {
		return nil
	}
	if alt := r.URL.Query()["alt"]; len(alt) != 1 || alt[0] != "sse" {
		return refuse(kindInvalid, "streamGenerateContent is carried as server-sent events only: add ?alt=sse (the JSON-array stream form is not supported)")
	}
	return nil
}

// Gemini members the guard reads, canonical (lowerCamelCase) names, as
// bits for duplicate detection.
const (
	gContents uint32 = 1 << iota
	gTools
	gGenerationConfig
	gCachedContent
	gModel
	gSystemInstruction
	gToolConfig
	gGenerateContentRequest
	gInlineData
	gFileData
	gFileURI
	gMimeType
	gData
	gMaxOutputTokens
	gCandidateCount
)

var geminiMembers = map[string]uint32{
	"contents": gContents, "tools": gTools, "generationConfig": gGenerationConfig,
	"cachedContent": gCachedContent, "model": gModel, "systemInstruction": gSystemInstruction,
	"toolConfig": gToolConfig, "generateContentRequest": gGenerateContentRequest,
	"inlineData": gInlineData, "fileData": gFileData, "fileUri": gFileURI,
	"mimeType": gMimeType, "data": gData,
	"maxOutputTokens": gMaxOutputTokens, "candidateCount": gCandidateCount,
}

// geminiOpaque are members whose value the provider never resolves as
// content: a function call's arguments (the model's own output), a
// function response's result (the agent's tool output) and JSON Schemas.
// They are validated as JSON and not read.
var geminiOpaque = map[string]bool{
	"args": true, "response": true, "parameters": true, "parametersJsonSchema": true,
	"responseSchema": true, "responseJsonSchema": true,
}

// geminiTools are the tool members a Gemini request may declare: function
// declarations, which the agent executes. Every other — googleSearch,
// googleSearchRetrieval, codeExecution, urlContext, retrieval, fileSearch,
// googleMaps, computerUse, enterpriseWebSearch, MCP servers, kinds not
// known yet — runs at the provider and is refused.
var geminiTools = map[string]bool{"functionDeclarations": true}

var (
	errGeminiFile   = refuse(kindForbidden, "fileData/fileUri parts are not allowed: they reference data (uploaded files, remote URLs) the broker cannot see; send the content inline as inlineData")
	errGeminiCached = refuse(kindForbidden, "cachedContent is not allowed: it references context stored in the provider account, which the broker cannot see; send the contents inline")
)

// canonical returns a member name in lowerCamelCase: Google's JSON parser
// reads max_output_tokens as maxOutputTokens.
func canonical(name []byte) string {
	i := 0
	for i < len(name) && name[i] != '_' {
		i++
	}
	if i == len(name) {
		return string(name)
	}
	out := make([]byte, 0, len(name))
	up := false
	for _, c := range name {
		switch {
		case c == '_':
			up = true
			continue
		case up && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		}
		up = false
		out = append(out, c)
	}
	return string(out)
}

// ggate is the Gemini request guard's state.
type ggate struct {
	lim   *Limits
	ep    *endpoint
	model []byte // the path's model; a "model" member must name it
	info  reqInfo
}

// guardGemini checks a Gemini request body for endpoint ep and the model
// the path named (nil: not checked against the path).
func guardGemini(body []byte, lim *Limits, ep *endpoint, model []byte) (reqInfo, *refusal) {
	g := ggate{lim: lim, ep: ep, model: model, info: reqInfo{maxOut: -1, choices: 1, model: model}}
	s := jscan{b: body}
	if s.peek() != '{' {
		return g.info, refuse(kindInvalid, "request body must be a JSON object")
	}
	g.info.open = s.i + 1
	g.info.stream = ep.stream
	err := s.object(func(k []byte, esc bool) error {
		name := canonical(text(k, esc))
		bit := geminiMembers[name]
		if bit != 0 {
			if g.info.top&bit != 0 {
				return refuse(kindInvalid, "duplicate member "+quoteForMessage([]byte(name)))
			}
			g.info.top |= bit
		}
		switch bit {
		case gGenerationConfig:
			if !ep.count {
				return g.generationConfig(&s)
			}
		case gTools:
			return g.tools(&s)
		}
		return g.known(&s, name, bit)
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
	if !ep.count && g.info.top&gContents == 0 {
		return g.info, refuse(kindInvalid, `"contents" is required`)
	}
	return g.info, nil
}

// known handles a member of any object: the ones that reference data the
// broker cannot see are refused, inline data is counted, opaque values are
// validated only, everything else is walked.
func (g *ggate) known(s *jscan, name string, bit uint32) error {
	if s.peek() == 'n' && bit != 0 {
		return s.literal("null")
	}
	switch bit {
	case gInlineData:
		return g.inlineData(s)
	case gFileData, gFileURI:
		return errGeminiFile
	case gCachedContent:
		if raw, _, err := s.str(); err != nil || len(raw) > 0 {
			return errGeminiCached
		}
		return nil
	case gModel:
		raw, esc, err := s.str()
		if err != nil {
			return refuse(kindInvalid, `"model" must be a string`)
		}
		m := text(raw, esc)
		if g.model != nil && string(m) != string(g.model) && string(m) != "models/"+string(g.model) {
			return refuse(kindInvalid, `"model" in the body must name the model of the request path`)
		}
		return nil
	case gTools:
		return g.tools(s)
	}
	if geminiOpaque[name] {
		return s.skip()
	}
	return g.walk(s)
}

// walk consumes any value, checking every object in it.
func (g *ggate) walk(s *jscan) error {
	switch s.peek() {
	case '{':
		return g.object(s)
	case '[':
		return s.array(func() error { return g.walk(s) })
	}
	return s.skip()
}

// object walks one nested object, refusing a member it reads twice.
func (g *ggate) object(s *jscan) error {
	var seen uint32
	return s.object(func(k []byte, esc bool) error {
		name := canonical(text(k, esc))
		bit := geminiMembers[name]
		if bit != 0 {
			if seen&bit != 0 {
				return refuse(kindInvalid, "duplicate member "+quoteForMessage([]byte(name)))
			}
			seen |= bit
		}
		return g.known(s, name, bit)
	})
}

// inlineData checks one inline blob: {"mimeType": …, "data": base64}.
func (g *ggate) inlineData(s *jscan) error {
	if s.peek() != '{' {
		return refuse(kindInvalid, `"inlineData" must be an object`)
	}
	var mt, data []byte
	var seen uint32
	err := s.object(func(k []byte, esc bool) error {
		name := canonical(text(k, esc))
		bit := geminiMembers[name]
		if bit != 0 {
			if seen&bit != 0 {
				return refuse(kindInvalid, "duplicate member "+quoteForMessage([]byte(name)))
			}
			seen |= bit
		}
		switch bit {
		case gMimeType, gData:
			raw, esc, err := s.str()
			if err != nil {
				return refuse(kindInvalid, `inlineData "mimeType" and "data" must be strings`)
			}
			if bit == gMimeType {
				mt = text(raw, esc)
			} else {
				data = raw
			}
			return nil
		}
		return g.known(s, name, bit)
	})
	if err != nil {
		return err
	}
	if mt == nil {
		mt = []byte{}
	}
	gd := guard{lim: g.lim, info: g.info}
	err = gd.inline(mt, b64Len(len(data)))
	g.info.attachments = gd.info.attachments
	return err
}

// tools checks every tool declaration: function declarations only.
func (g *ggate) tools(s *jscan) error {
	return eachTool(s, func() error {
		return s.object(func(k []byte, esc bool) error {
			name := canonical(text(k, esc))
			if s.peek() == 'n' {
				return s.literal("null")
			}
			if !geminiTools[name] {
				return refuse(kindForbidden, "tool "+quoteForMessage([]byte(name))+" is not allowed: "+serverSideRule)
			}
			return g.walk(s)
		})
	})
}

// generationConfig reads the output limit and the candidate count, and
// records where the broker may add a cap.
func (g *ggate) generationConfig(s *jscan) error {
	switch s.peek() {
	case 'n':
		g.info.genNull = s.i
		return s.literal("null")
	case '{':
	default:
		return refuse(kindInvalid, `"generationConfig" must be an object`)
	}
	g.info.genOpen = s.i + 1
	var seen uint32
	return s.object(func(k []byte, esc bool) error {
		g.info.genMembers = true
		name := canonical(text(k, esc))
		bit := geminiMembers[name]
		if bit != 0 {
			if seen&bit != 0 {
				return refuse(kindInvalid, "duplicate member "+quoteForMessage([]byte(name)))
			}
			seen |= bit
		}
		switch bit {
		case gMaxOutputTokens, gCandidateCount:
			if s.peek() == 'n' {
				if bit == gMaxOutputTokens {
					g.info.nullOutput = s.i
				}
				return s.literal("null")
			}
			raw, err := s.number()
			n, ok := uintValue(raw)
			ok = ok && err == nil // a string ("100") is refused too
			if bit == gCandidateCount {
				if !ok || n < 1 || n > maxChoices {
					return refuse(kindInvalid, fmt.Sprintf(`"candidateCount" must be an integer from 1 to %d`, maxChoices))
				}
				g.info.choices = n
				return nil
			}
			if !ok || n < 1 || n > maxOutputCap {
				return refuse(kindInvalid, fmt.Sprintf(`"maxOutputTokens" must be an integer from 1 to %d`, maxOutputCap))
			}
			g.info.caps |= gMaxOutputTokens
			g.info.maxOut = n
			return nil
		}
		return g.known(s, name, bit)
	})
}

// geminiCapEdits plans the output cap of a Gemini request that sets none:
// generationConfig.maxOutputTokens, added where the guard found room.
func geminiCapEdits(info *reqInfo, ep *endpoint, max int64) capPlan {
	var p capPlan
	if ep.count || info.caps&gMaxOutputTokens != 0 {
		return p
	}
	p.cap = max
	num := strconv.AppendInt(nil, max, 10)
	switch {
	case info.top&gGenerationConfig == 0:
		ins := append(append([]byte(`"generationConfig":{"maxOutputTokens":`), num...), "},"...)
		p.add(edit{at: info.open, ins: ins})
	case info.genNull > 0:
		ins := append(append([]byte(`{"maxOutputTokens":`), num...), '}')
		p.add(edit{at: info.genNull, cut: len("null"), ins: ins})
	case info.nullOutput > 0:
		p.add(edit{at: info.nullOutput, cut: len("null"), ins: num})
	default:
		ins := append([]byte(`"maxOutputTokens":`), num...)
		if info.genMembers {
			ins = append(ins, ',')
		}
		p.add(edit{at: info.genOpen, ins: ins})
	}
	return p
}

// geminiChunk reads a generateContent response or one stream chunk: tool
// calls for the receipt, the usage, and whether the call is over (a
// candidate's finishReason, or a blocked prompt). Output usage is taken
// only once every candidate asked for (candidateCount) has finished, or
// from a whole response: a stream's earlier chunks carry running counts,
// and the first candidate to finish does not end the others.
func (x *exchange) geminiChunk(f *fields, whole bool) {
	done := whole
	each(f.candidates, func(c []byte) {
		if fr, ok := strValue(dig(c, "finishReason")); ok && len(fr) > 0 && string(fr) != "FINISH_REASON_UNSPECIFIED" {
			done = true
			x.geminiFinished(dig(c, "index"))
		}
		each(dig(c, "content", "parts"), func(part []byte) {
			if name, ok := strValue(dig(part, "functionCall", "name")); ok {
				x.tool([]byte("functionCall"), name)
			}
		})
	})
	final := whole || x.gFinished >= x.info.choices
	if br := dig(f.feedback, "blockReason"); len(br) > 0 && string(br) != "null" {
		done, final = true, true
	}
	if len(f.errv) > 0 && string(f.errv) != "null" {
		done, final = true, true
	}
	// A chunk after the one that ended the call (usage sent apart) is
	// final too.
	if final && done {
		x.gFinal = true
	}
	// Input is the prompt (cached content is part of promptTokenCount)
	// plus tool-use prompts; output the candidates plus the thoughts.
	x.tokens(f.usageMeta, geminiIn, geminiOut, x.gFinal)
	if done {
		x.done = true
	}
}

// geminiFinished counts a finished candidate once by its index (absent:
// 0, as proto3 JSON omits it); an index out of range counts nothing, so
// the usage is never final early.
func (x *exchange) geminiFinished(idx []byte) {
	n := int64(0)
	if len(idx) > 0 {
		v, ok := uintValue(idx)
		if !ok || v >= maxChoices {
			return
		}
		n = v
	}
	if bit := uint64(1) << (n % 64); x.gDone[n/64]&bit == 0 {
		x.gDone[n/64] |= bit
		x.gFinished++
	}
}
