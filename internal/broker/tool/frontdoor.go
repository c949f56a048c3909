package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// rpcIDHeader carries a tools/call's JSON-RPC id from the front door to
// the tool handler (the SDK does not expose it). The front door deletes
// any the agent sent.
const rpcIDHeader = "X-Cordon-Rpc-Id"

// Path is the MCP endpoint on the tools listener.
const Path = "/mcp"

// frame is what the front door reads of one JSON-RPC message.
type frame struct {
	Method string
	ID     json.RawMessage
}

var errFrame = errors.New("invalid JSON-RPC frame")

// parseFrame checks one message the agent POSTed: a single JSON object
// (batches are refused), strict JSON, jsonrpc "2.0", a short method and
// an id that is a string or a number.
func parseFrame(b []byte) (frame, error) {
	var f frame
	t := bytes.TrimLeft(b, " \t\r\n")
	if len(t) == 0 || t[0] != '{' {
		return f, fmt.Errorf("%w: want one JSON-RPC object (batches are not supported)", errFrame)
	}
	if err := strictJSON(b); err != nil {
		return f, fmt.Errorf("%w: %v", errFrame, err)
	}
	var m struct {
		JSONRPC *string         `json:"jsonrpc"`
		Method  *string         `json:"method"`
		ID      json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return f, fmt.Errorf("%w: %v", errFrame, err)
	}
	if m.JSONRPC == nil || *m.JSONRPC != "2.0" {
		return f, fmt.Errorf("%w: jsonrpc must be \"2.0\"", errFrame)
	}
	if m.Method != nil {
		if len(*m.Method) == 0 || len(*m.Method) > 128 {
			return f, fmt.Errorf("%w: method must be 1 to 128 bytes", errFrame)
		}
		f.Method = *m.Method
	}
	if len(m.ID) > 0 {
		if len(m.ID) > 128 {
			return f, fmt.Errorf("%w: id longer than 128 bytes", errFrame)
		}
		switch m.ID[0] {
		case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		default:
			if string(m.ID) != "null" {
				return f, fmt.Errorf("%w: id must be a string or a number", errFrame)
			}
		}
		f.ID = m.ID
	}
	return f, nil
}

// frontDoor bounds and checks what the agent POSTs before the MCP SDK
// sees it, and tells the tool handler each call's JSON-RPC id.
func (b *Broker) frontDoor(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path {
			http.Error(w, "cordon: the MCP endpoint is "+Path, http.StatusNotFound)
			return
		}
		for k := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "x-cordon-") {
				delete(r.Header, k)
			}
		}
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(io.LimitReader(r.Body, int64(b.lim.MaxFrameBytes)+1))
			if err != nil {
				rpcError(w, http.StatusBadRequest, -32700, "cordon: reading the request: "+err.Error())
				return
			}
			if len(body) > b.lim.MaxFrameBytes {
				rpcError(w, http.StatusRequestEntityTooLarge, -32600, fmt.Sprintf("cordon: MCP message larger than %d bytes", b.lim.MaxFrameBytes))
				return
			}
			f, err := parseFrame(body)
			if err != nil {
				rpcError(w, http.StatusBadRequest, -32600, "cordon: "+err.Error())
				return
			}
			if f.Method == "tools/call" && len(f.ID) > 0 {
				r.Header.Set(rpcIDHeader, string(f.ID))
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		next.ServeHTTP(w, r)
	})
}

// rpcError answers with a JSON-RPC error object (id null: the request
// could not be read far enough to know it).
func rpcError(w http.ResponseWriter, status, code int, msg string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
