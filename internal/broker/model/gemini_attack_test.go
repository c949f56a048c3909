package model

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-project/cordon/internal/crossing"
	"github.com/cordon-project/cordon/internal/store"
)

// The attacks of a hostile agent on the Gemini path that the tests of
// gemini_test.go do not already cover; each has its control.

// geminiPolyglot is a body the guard accepts as JSON — one unknown member
// and "contents" — whose bytes, read as a binary protobuf
// GenerateContentRequest, carry cached_content (field 9), which the guard
// refuses in JSON: '{' opens an unknown group (field 15) that '|' closes,
// 'J' is field 9 with a length of '0' (48 bytes), and 'z' (field 15) with
// a length of 'B' (66 bytes) swallows the rest of the JSON.
const geminiPolyglot = `{" 0123456789abcdefghijklmnopqrstuv|J0cachedContents/polyglot-aaaaaaaaaaaaaaaaaaaaaaaazB":1,"contents":[{"parts":[{"text":"hi aaaaaaaaaaaaaaaaaaaaaa"}]}]}`

// protoStrings returns the length-delimited fields of a protobuf message
// by field number (groups skipped); ok is false when b is not one.
func protoStrings(b []byte) (map[int]string, bool) {
	out := map[int]string{}
	varint := func() (uint64, bool) {
		var v uint64
		for s := 0; s < 64 && len(b) > 0; s += 7 {
			c := b[0]
			b = b[1:]
			v |= uint64(c&0x7f) << s
			if c < 0x80 {
				return v, true
			}
		}
		return 0, false
	}
	depth := 0
	for len(b) > 0 {
		tag, ok := varint()
		if !ok {
			return nil, false
		}
		switch field := int(tag >> 3); tag & 7 {
		case 0:
			if _, ok := varint(); !ok {
				return nil, false
			}
		case 1, 5:
			n := 8
			if tag&7 == 5 {
				n = 4
			}
			if len(b) < n {
				return nil, false
			}
			b = b[n:]
		case 2:
			n, ok := varint()
			if !ok || n > uint64(len(b)) {
				return nil, false
			}
			if depth == 0 {
				out[field] = string(b[:n])
			}
			b = b[n:]
		case 3:
			depth++
		case 4:
			if depth--; depth < 0 {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	return out, depth == 0
}

// The body the broker forwards is the JSON it checked, and it says so: an
// agent's Content-Type (binary protobuf, JSPB, a form), under which the
// provider would read the same bytes as another request than the guard
// read, is not forwarded; Content-Type is application/json. The control:
// the polyglot is a protobuf naming a cached content, and passes the
// guard as JSON (the guard is not what stops it).
func TestGeminiContentTypeIsJSON(t *testing.T) {
	if f, ok := protoStrings([]byte(geminiPolyglot)); !ok || !strings.HasPrefix(f[9], "cachedContents/") {
		t.Fatalf("control: the polyglot is not a protobuf with cached_content: %v %v", f, ok)
	}
	up, seen := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, geminiReply)
	})
	s := newSetup(t, up.URL, nil)
	cts := []string{"application/x-protobuf", "application/json+protobuf", "application/x-www-form-urlencoded", "application/json; charset=utf-16", ""}
	for _, ct := range cts {
		req, _ := http.NewRequest("POST", s.srv.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(geminiPolyglot))
		req.Header["Content-Type"] = []string{ct}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("Content-Type %q: status %d, want 200 (the guard accepts the JSON)", ct, resp.StatusCode)
		}
	}
	if seen.count() != len(cts) {
		t.Fatalf("upstream saw %d requests, want %d", seen.count(), len(cts))
	}
	for i, r := range seen.requests {
		if got := r.Header.Values("Content-Type"); len(got) != 1 || got[0] != "application/json" {
			t.Errorf("agent Content-Type %q reached the upstream as %q, want application/json", cts[i], got)
		}
	}
}

// A stream of two candidates whose first finishes early: the agent reads
// that chunk (its usage counts the first candidate only) and hangs up.
// The call generated two candidates and reported neither total, so it
// settles the whole output reservation (the cap times candidateCount),
// not the first candidate's running count. The control is the same
// stream read to its end, which settles the final chunk's usage.
func TestGeminiStreamCandidatesFinal(t *testing.T) {
	chunks := []string{
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]},\"finishReason\":\"STOP\"},{\"content\":{\"parts\":[{\"text\":\"b\"}]},\"index\":1}],\"usageMetadata\":{\"promptTokenCount\":5,\"candidatesTokenCount\":2}}\r\n\r\n",
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"bb\"}]},\"finishReason\":\"STOP\",\"index\":1}],\"usageMetadata\":{\"promptTokenCount\":5,\"candidatesTokenCount\":700}}\r\n\r\n",
	}
	body := `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":1000,"candidateCount":2}}`
	for _, tt := range []struct {
		name    string
		hangUp  bool
		wantOut int64
	}{
		{"agent hangs up after the first candidate", true, 2000},
		{"control: read to the end", false, 700},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, chunks[0])
				w.(http.Flusher).Flush()
				if tt.hangUp {
					<-r.Context().Done() // still generating the second
					return
				}
				io.WriteString(w, chunks[1])
			})
			s := newSetup(t, up.URL, nil)
			req, _ := http.NewRequest("POST", s.srv.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", strings.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			first := make([]byte, len(chunks[0]))
			if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != chunks[0] {
				t.Fatalf("first chunk %q: %v", first, err)
			}
			if !tt.hangUp {
				io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
			rc := s.authority.lastReceipt(t)
			if rc.Usage.OutputTokens != tt.wantOut {
				t.Errorf("settled %d output tokens (%s), want %d", rc.Usage.OutputTokens, rc.Reason, tt.wantOut)
			}
		})
	}
}

// maxSettledForTest is store.MaxAmount: a settlement above it (or below
// 0) is refused by the store, and the crossing's receipt with it.
const maxSettledForTest = store.MaxAmount

// maxSettle is the store's bound, not a copy that could drift from it.
func TestMaxSettleIsStoreBound(t *testing.T) {
	if maxSettle != store.MaxAmount {
		t.Fatalf("maxSettle = %d, store.MaxAmount = %d", int64(maxSettle), int64(store.MaxAmount))
	}
}

// An upstream's usageMetadata is untrusted: counts repeated until their
// sum wraps int64, or one count past what the store settles, must still
// settle an amount the store accepts (never negative: that would hand
// budget back, and the store refuses it, losing the receipt). The control
// is an honest usage, settled as reported.
func TestGeminiAbsurdUsage(t *testing.T) {
	huge := strings.Repeat(`"candidatesTokenCount":9007199254740992,`, 1100)
	for _, tt := range []struct {
		name, usage string
		want        int64 // output tokens settled; -1: within [reservation, maxSettled]
	}{
		{"sum wraps", `{"promptTokenCount":3,` + huge + `"thoughtsTokenCount":1}`, -1},
		{"one count past the store", `{"promptTokenCount":3,"candidatesTokenCount":9007199254740992}`, -1},
		{"control", `{"promptTokenCount":3,"candidatesTokenCount":20,"thoughtsTokenCount":1}`, 21},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reply := `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":` + tt.usage + `}`
			up, _ := fakeProvider(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, reply)
			})
			s := newSetup(t, up.URL, nil)
			resp, _ := s.postGemini(t, "/v1beta/models/gemini-2.5-flash:generateContent", `{"contents":[{"parts":[{"text":"hi"}]}]}`)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			u := s.authority.lastReceipt(t).Usage
			for _, v := range []int64{u.InputTokens, u.OutputTokens} {
				if v < 0 || v > maxSettledForTest {
					t.Errorf("settled %+v: a token count outside [0, 2^50]", u)
				}
			}
			if tt.want >= 0 && u.OutputTokens != tt.want {
				t.Errorf("settled %d output tokens, want %d", u.OutputTokens, tt.want)
			}
			if tt.want < 0 && u.OutputTokens < 4096 {
				t.Errorf("settled %d output tokens, want at least the reservation", u.OutputTokens)
			}
		})
	}
}

// nthReceipt waits for the n-th receipt and returns it: the handler
// records after its answer is sent, so after several calls the last
// receipt present may still be an earlier call's.
func (l *fakeAuthority) nthReceipt(t *testing.T, n int) crossing.Receipt {
	t.Helper()
	for range 400 {
		l.mu.Lock()
		got := len(l.receipts)
		l.mu.Unlock()
		if got >= n {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.receipts) < n {
		t.Fatalf("%d receipts recorded, want %d", len(l.receipts), n)
	}
	return l.receipts[n-1]
}
