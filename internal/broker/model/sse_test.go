package model

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type gotEvent struct{ Name, Data, Raw string }

// parseAll feeds in in pieces of size step (0: all at once) and returns the
// events and the finish error.
func parseAll(in string, step int) ([]gotEvent, error) {
	var p sseParser
	var got []gotEvent
	emit := func(ev *sseEvent) error {
		g := gotEvent{Name: string(ev.name), Raw: string(ev.raw)}
		if ev.data != nil {
			g.Data = "<" + string(ev.data) + ">"
		}
		got = append(got, g)
		return nil
	}
	if step <= 0 {
		step = len(in) + 1
	}
	for i := 0; i < len(in); i += step {
		if err := p.feed([]byte(in[i:min(i+step, len(in))]), emit); err != nil {
			return got, err
		}
	}
	return got, p.finish(emit)
}

func TestSSEParser(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []gotEvent
		err  error
	}{
		{"anthropic event", "event: ping\ndata: {\"type\":\"ping\"}\n\n",
			[]gotEvent{{"ping", `<{"type":"ping"}>`, "event: ping\ndata: {\"type\":\"ping\"}\n\n"}}, nil},
		{"openai data only", "data: {}\n\ndata: [DONE]\n\n",
			[]gotEvent{{"", "<{}>", "data: {}\n\n"}, {"", "<[DONE]>", "data: [DONE]\n\n"}}, nil},
		{"CRLF", "event: a\r\ndata: 1\r\n\r\n", []gotEvent{{"a", "<1>", "event: a\r\ndata: 1\r\n\r\n"}}, nil},
		{"lone CR", "data: 1\r\r", []gotEvent{{"", "<1>", "data: 1\r\r"}}, nil},
		{"multi-line data", "data: a\ndata:b\ndata\n\n", []gotEvent{{"", "<a\nb\n>", "data: a\ndata:b\ndata\n\n"}}, nil},
		{"comment and id", ": keep-alive\nid: 7\nretry: 10\n\n", []gotEvent{{"", "", ": keep-alive\nid: 7\nretry: 10\n\n"}}, nil},
		{"no space after colon", "event:x\ndata:y\n\n", []gotEvent{{"x", "<y>", "event:x\ndata:y\n\n"}}, nil},
		{"truncated", "data: {\"a\":1}\n", nil, errSSETruncated},
		{"truncated line", "data: {\"a\"", nil, errSSETruncated},
		{"line too long", "data: " + strings.Repeat("x", maxSSELine+1) + "\n\n", nil, errSSELine},
		{"event too large", strings.Repeat("data: "+strings.Repeat("x", 1<<19)+"\n", 5) + "\n", nil, errSSEEvent},
		{"empty", "", nil, nil},
	}
	for _, tt := range tests {
		for _, step := range []int{0, 1, 2, 3, 7, 64} {
			if step == 1 && len(tt.in) > 4096 {
				continue
			}
			got, err := parseAll(tt.in, step)
			if !errors.Is(err, tt.err) {
				t.Errorf("%s/step %d: err = %v, want %v", tt.name, step, err, tt.err)
				continue
			}
			if tt.err == nil {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("%s/step %d: events (-want +got):\n%s", tt.name, step, diff)
				}
			}
		}
	}
}

// A line that arrives a few bytes at a time is not searched again from its
// start each time (the upstream chooses the chunking).
func TestSSEParserLongLineInSmallPieces(t *testing.T) {
	var p sseParser
	line := append([]byte("data: "), bytes.Repeat([]byte("y"), 200000)...)
	n := 0
	emit := func(ev *sseEvent) error { n++; return nil }
	for i := 0; i < len(line); i += 3 {
		if err := p.feed(line[i:min(i+3, len(line))], emit); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.feed([]byte("\n\n"), emit); err != nil || n != 1 {
		t.Fatalf("feed = %v, %d events", err, n)
	}
}

func TestSSEParserEmitErrorStops(t *testing.T) {
	var p sseParser
	stop := errors.New("stop")
	n := 0
	err := p.feed([]byte("data: 1\n\ndata: 2\n\n"), func(*sseEvent) error { n++; return stop })
	if err != stop || n != 1 {
		t.Errorf("feed = %v after %d events, want stop after 1", err, n)
	}
}
