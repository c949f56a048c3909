package model

import "fmt"

// The members the request guard reads: the request's top-level members
// (guardRequest) and the members of a content object it knows (object).

// member checks the value of the request's top-level member name, s at
// the value, and notes what the broker needs of it in g.info.
func (g *guard) member(s *jscan, name []byte) error {
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
		return g.maxTokens(s, name)
	case "stream_options":
		if s.peek() == 'n' {
			g.info.nullStreamOptions = s.i
			return s.literal("null")
		}
		return g.walk(s)
	case "tools":
		return g.tools(s)
	case "tool_choice":
		return g.toolChoice(s)
	case "web_search_options", "previous_response_id", "conversation", "container":
		// Provider-side search, stored responses and conversations,
		// code-execution containers (with their files and skills).
		if s.peek() == 'n' {
			return s.literal("null")
		}
		return refuseServerSide(name)
	case "background":
		// A background response runs after this call has returned:
		// the broker would never see what it generated (nor could the
		// agent fetch it: GET /v1/responses/{id} is not carried).
		switch s.peek() {
		case 'n':
			return s.literal("null")
		case 'f':
			return s.literal("false")
		}
		return refuseServerSide(name)
	case "prompt":
		// A Responses stored prompt: {"id": "pmpt_…", …}.
		if s.peek() == '{' {
			return refuseServerSide(name)
		}
		return g.walk(s)
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
	return g.walk(s)
}

// known reads the value of a member the guard knows (bit), s at the
// value, into n.
func (g *guard) known(s *jscan, n *node, bit uint16) error {
	switch bit {
	case mType:
		if s.peek() == 'n' {
			n.typNull = true
			return s.literal("null")
		}
		return g.str(s, &n.typ, true)
	case mMediaType:
		return g.str(s, &n.mediaType, true)
	case mData:
		return g.str(s, &n.data, false)
	case mURL:
		return g.str(s, &n.url, true)
	case mFileData:
		return g.str(s, &n.fileData, true)
	case mFileID, mFileIDs:
		// A provider file reference, wherever it is: it could
		// name data the route's account holds for someone else.
		if s.peek() != 'n' && g.opaque == 0 {
			g.fileRefs++
		}
		if bit == mFileIDs {
			return g.walk(s)
		}
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
	case mEnvironment:
		return g.child(s, &n.env) // a string (computer_use_preview's "linux") names no container
	}
	return g.walk(s) // mServerURL: presence is what matters
}
