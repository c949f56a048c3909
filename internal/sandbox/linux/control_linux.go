package linux

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/cordon-project/cordon/internal/sandbox/linux/sbinit"
)

// next returns the init's next control message. A message that carried
// descriptors here is refused (only Exec's "started", or with the console
// at start the "console" before "ready", may carry one).
func (sb *linuxSandbox) next(ctx context.Context, timeout time.Duration) (sbinit.Message, error) {
	m, fds, err := sb.nextFDs(ctx, timeout)
	if len(fds) > 0 {
		closeAll(fds)
		return m, fmt.Errorf("control message %q carried descriptors", m.Type)
	}
	return m, err
}

// nextFDs is next with the descriptors the message carried.
func (sb *linuxSandbox) nextFDs(ctx context.Context, timeout time.Duration) (sbinit.Message, []*os.File, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case e, ok := <-sb.events:
		if !ok {
			return sbinit.Message{}, nil, fmt.Errorf("the sandbox init exited (%v)", sb.exitText())
		}
		return e.msg, e.fds, e.err
	case <-t.C:
		return sbinit.Message{}, nil, fmt.Errorf("no answer from the sandbox init within %s", timeout)
	case <-ctx.Done():
		return sbinit.Message{}, nil, ctx.Err()
	}
}

// readControl turns the init's messages into events. Messages are small
// JSON packets; anything else ends the channel.
func (sb *linuxSandbox) readControl() {
	defer close(sb.events)
	buf := make([]byte, 64<<10)
	for {
		n, fds, err := recvControl(sb.ctl, buf)
		if err != nil || n == 0 {
			// A truncated message is never acted on: the channel ends.
			closeAll(fds)
			return
		}
		var m sbinit.Message
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			closeAll(fds)
			sb.events <- event{err: fmt.Errorf("malformed control message: %w", err)}
			return
		}
		if m.Type != "started" && m.Type != "console" && len(fds) > 0 {
			closeAll(fds)
			sb.events <- event{err: fmt.Errorf("control message %q carried descriptors", m.Type)}
			return
		}
		if m.Type == "exit" {
			sb.mu.Lock()
			sb.exit = &m
			sb.mu.Unlock()
			sb.mainOnce.Do(func() { close(sb.mainDone) })
		}
		sb.events <- event{msg: m, fds: fds}
	}
}

// drainEvents reads events until the channel ends, closing any descriptor
// one carried: only Exec takes a descriptor (the "started" message's pty
// master); one that arrives later is never kept open in the trusted side.
func drainEvents(events <-chan event) {
	for e := range events {
		closeAll(e.fds)
	}
}
