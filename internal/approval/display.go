package approval

import (
	"bytes"
	"encoding/json"

	"github.com/cordon-project/cordon/internal/textsafe"
)

// DisplayJSON renders an approval's arguments for a human: indented JSON
// with every character that would not show up on screen (controls,
// bidirectional overrides, zero-width and non-ASCII spaces, stacked marks)
// written as a JSON \u escape by textsafe.JSON, so that what the approver
// reads is the same JSON value, with nothing hidden or reordered. Text
// that is not valid JSON is shown escaped by textsafe.Line.
func DisplayJSON(raw []byte) string {
	var buf bytes.Buffer
	// Indent keeps trailing whitespace; a stray \r must not become \u000d
	// outside a string.
	if err := json.Indent(&buf, bytes.Trim(raw, " \t\r\n"), "", "  "); err != nil {
		return DisplayText(string(raw))
	}
	return textsafe.JSON(buf.Bytes())
}

// CompactJSON is DisplayJSON on one line, for tables.
func CompactJSON(raw []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return DisplayText(string(raw))
	}
	return textsafe.JSON(buf.Bytes())
}

// DisplayText is textsafe.Line: for untrusted one-line fields such as a
// tool name, shown in a terminal or a page.
func DisplayText(s string) string { return textsafe.Line(s) }
