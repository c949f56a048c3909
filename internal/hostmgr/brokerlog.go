package hostmgr

import (
	"bytes"
	"log/slog"
	"sync"

	"github.com/cordon-project/cordon/internal/textsafe"
)

// The gateway's broker processes are agent-facing and unprivileged; they
// log their own warnings to stderr. In the daemon that stream is not
// handed on raw (a compromised broker would write terminal controls to
// the operator's terminal, or lines that pass for the daemon's own
// records, in either log format): each line becomes the value of one
// record the daemon's logger writes, escaped.

// maxBrokerLine bounds a line held while its end has not come; a longer
// one is logged in pieces.
const maxBrokerLine = 16 << 10

// brokerLog is the io.Writer the broker processes' stderr goes to.
type brokerLog struct {
	mu      sync.Mutex
	log     *slog.Logger
	partial []byte
}

func newBrokerLog(log *slog.Logger) *brokerLog {
	return &brokerLog{log: log.With("component", "gateway")}
}

func (b *brokerLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data := append(b.partial, p...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		b.line(data[:i])
		data = data[i+1:]
	}
	for len(data) > maxBrokerLine {
		b.line(data[:maxBrokerLine])
		data = data[maxBrokerLine:]
	}
	b.partial = append(b.partial[:0:0], data...)
	return len(p), nil
}

func (b *brokerLog) line(l []byte) {
	if len(bytes.TrimSpace(l)) == 0 {
		return
	}
	b.log.Warn("gateway process stderr", "line", textsafe.Line(string(l)))
}
