package evlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/cordon-project/cordon/internal/crossing"
)

// maxReceipt bounds a receipt body ParseReceipt accepts.
const maxReceipt = 1 << 20

// ParseReceipt decodes a stored receipt body (a leaf's data). The log
// hashes bodies as bytes and never needs to parse them; this is for
// showing a proven receipt. It never panics, whatever body holds.
func ParseReceipt(body []byte) (crossing.Receipt, error) {
	if len(body) > maxReceipt {
		return crossing.Receipt{}, fmt.Errorf("receipt body: %d bytes, more than %d", len(body), maxReceipt)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var rc crossing.Receipt
	if err := dec.Decode(&rc); err != nil {
		return crossing.Receipt{}, fmt.Errorf("receipt body: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return crossing.Receipt{}, errors.New("receipt body: data after the receipt")
	}
	return rc, nil
}
