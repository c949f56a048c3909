package model

import (
	"bytes"
	"fmt"
	"path"
	"unicode/utf8"
)

// reqInfo is what the request guard learned from a body. The body itself is
// forwarded byte for byte: the guard reads, it never rewrites.
type reqInfo struct {
	model       []byte // decoded "model"
	stream      bool
	maxOut      int64 // largest of max_tokens / max_completion_tokens / max_output_tokens; -1 when none
	choices     int64 // OpenAI "n"; 1 when absent
	attachments int
}

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
)

// Top-level members the guard reads, for the same duplicate check.
var topMembers = map[string]uint16{
	"model": 1 << 0, "stream": 1 << 1, "n": 1 << 2,
	"max_tokens": 1 << 3, "max_completion_tokens": 1 << 4, "max_output_tokens": 1 << 5,
}

var members = map[string]uint16{
	"type": mType, "media_type": mMediaType, "data": mData, "url": mURL,
	"file_data": mFileData, "file_id": mFileID, "file_url": mFileURL, "format": mFormat,
	"server_url": mServerURL, "source": mSource, "image_url": mImageURL, "file": mFile,
	"input_audio": mInputAudio,
}

// leaf holds the string members of one object that the guard looks at.
type leaf struct {
	typ, mediaType, data, url, fileData, fileID, fileURL, format []byte
	seen                                                         uint16
}

// node is one object of the body: its own strings and the few child objects
// that describe an attachment (Anthropic "source", OpenAI "image_url",
// "file", "input_audio").
type node struct {
	leaf
	imageURL                         []byte // "image_url" given as a string (Responses input_image)
	source, imageURLObj, file, audio leaf
}

type guard struct {
	lim  *Limits
	info reqInfo
}

// guardRequest checks a request body against the limits and returns what the
// broker needs to route and budget it. Refusals are kindInvalid,
// kindForbidden or kindTooLarge.
func guardRequest(body []byte, lim *Limits) (reqInfo, *refusal) {
	g := guard{lim: lim, info: reqInfo{maxOut: -1, choices: 1}}
	s := jscan{b: body}
	if s.peek() != '{' {
		return g.info, refuse(kindInvalid, "request body must be a JSON object")
	}
	var seen uint16
	err := s.object(func(k []byte, esc bool) error {
		name := text(k, esc)
		if bit := topMembers[string(name)]; bit != 0 {
			if seen&bit != 0 {
				return refuse(kindInvalid, "duplicate member "+quoteForMessage(name))
			}
			seen |= bit
		}
		switch string(name) {
		case "model":
			raw, esc, err := s.str()
			if err != nil {
				return refuse(kindInvalid, `"model" must be a string`)
			}
			g.info.model = text(raw, esc)
			return nil
		case "stream":
			switch s.peek() {
			case 't':
				g.info.stream = true
				return s.literal("true")
			case 'f':
				return s.literal("false")
			case 'n':
				return s.literal("null")
			}
			return refuse(kindInvalid, `"stream" must be a boolean`)
		case "max_tokens", "max_completion_tokens", "max_output_tokens":
			// Several different ones reserve the largest.
			return g.maxTokens(&s, name)
		case "n":
			if s.peek() == 'n' {
				return s.literal("null")
			}
			raw, err := s.number()
			if err != nil {
				return err
			}
			n, ok := uintValue(raw)
			if !ok || n < 1 || n > maxChoices {
				return refuse(kindInvalid, fmt.Sprintf(`"n" must be an integer from 1 to %d`, maxChoices))
			}
			g.info.choices = n
			return nil
		case "mcp_servers":
			return errMCP
		}
		return g.walk(&s)
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
	switch m := g.info.model; {
	case seen&topMembers["model"] == 0:
		return g.info, refuse(kindInvalid, `"model" is required`)
	case len(m) == 0 || len(m) > maxModelLen || !utf8.Valid(m):
		return g.info, refuse(kindInvalid, `"model" must be a model id`)
	}
	return g.info, nil
}

// maxTokens reads one of the output-limit members; duplicates of the same
// name are refused.
func (g *guard) maxTokens(s *jscan, name []byte) error {
	if s.peek() == 'n' {
		return s.literal("null")
	}
	raw, err := s.number()
	if err != nil {
		return err
	}
	n, ok := uintValue(raw)
	if !ok {
		return refuse(kindInvalid, quoteForMessage(name)+" must be a non-negative integer")
	}
	if n > g.info.maxOut {
		g.info.maxOut = n
	}
	return nil
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
	err := s.object(func(k []byte, esc bool) error {
		name := text(k, esc)
		bit := members[string(name)]
		if bit == 0 {
			return g.walk(s)
		}
		if n.seen&bit != 0 {
			return refuse(kindInvalid, "duplicate member "+quoteForMessage(name))
		}
		n.seen |= bit
		switch bit {
		case mType:
			return g.str(s, &n.typ, true)
		case mMediaType:
			return g.str(s, &n.mediaType, true)
		case mData:
			return g.str(s, &n.data, false)
		case mURL:
			return g.str(s, &n.url, true)
		case mFileData:
			return g.str(s, &n.fileData, true)
		case mFileID:
			return g.str(s, &n.fileID, false)
		case mFileURL:
			return g.str(s, &n.fileURL, false)
		case mFormat:
			return g.str(s, &n.format, true)
		case mImageURL:
			if s.peek() == '"' {
				return g.str(s, &n.imageURL, true)
			}
			return g.child(s, &n.imageURLObj)
		case mSource:
			return g.child(s, &n.source)
		case mFile:
			return g.child(s, &n.file)
		case mInputAudio:
			return g.child(s, &n.audio)
		}
		return g.walk(s) // mServerURL: presence is what matters
	})
	if err != nil {
		return leaf{}, err
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
	errRemote = refuse(kindForbidden, "attachments must be inline (base64 or data: URL): a remote URL would make the provider fetch a destination nobody declared")
	errByRef  = refuse(kindForbidden, "attachments must be inline (base64 or data: URL): provider file references are not allowed")
	errMCP    = refuse(kindForbidden, "remote MCP servers are not allowed: tools are reached through the cordon tool broker")
)

// classify recognises an attachment by its shape (type plus payload member)
// and checks it.
func (g *guard) classify(n *node) error {
	switch string(n.typ) {
	case "image", "document": // Anthropic content blocks
		src := n.source
		if src.seen == 0 {
			return nil
		}
		switch string(src.typ) {
		case "base64":
			return g.inline(src.mediaType, b64Len(len(src.data)))
		case "text":
			mt := src.mediaType
			if mt == nil {
				mt = []byte("text/plain")
			}
			return g.inline(mt, int64(len(src.data)))
		case "content":
			return nil // nested blocks were walked and checked themselves
		case "url":
			return errRemote
		case "file":
			return errByRef
		}
		return refuse(kindInvalid, "unsupported attachment source type "+quoteForMessage(src.typ))
	case "image_url": // OpenAI chat
		if n.imageURLObj.url != nil {
			return g.dataURL(n.imageURLObj.url)
		}
		if n.imageURL != nil {
			return g.dataURL(n.imageURL)
		}
	case "input_image": // OpenAI Responses
		if n.fileID != nil {
			return errByRef
		}
		if n.imageURL != nil {
			return g.dataURL(n.imageURL)
		}
	case "file": // OpenAI chat
		if n.file.fileID != nil {
			return errByRef
		}
		if n.file.fileData != nil {
			return g.fileData(n.file.fileData)
		}
	case "input_file": // OpenAI Responses
		if n.fileID != nil {
			return errByRef
		}
		if n.fileURL != nil {
			return errRemote
		}
		if n.fileData != nil {
			return g.fileData(n.fileData)
		}
	case "input_audio": // OpenAI chat
		if n.audio.data != nil {
			return g.inline(append([]byte("audio/"), n.audio.format...), b64Len(len(n.audio.data)))
		}
	case "mcp": // OpenAI Responses remote MCP tool
		if n.seen&mServerURL != 0 {
			return errMCP
		}
	}
	return nil
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
