//go:build !linux

package proto

import (
	"context"
	"log/slog"
	"os"
)

// Listener is the daemon's socket; the transport needs Linux.
type Listener struct {
	Logger   *slog.Logger
	MaxConns int
}

// Listen returns ErrUnsupported off Linux.
func Listen(path string, mode os.FileMode, gid int) (*Listener, error) { return nil, ErrUnsupported }

// Path returns "".
func (l *Listener) Path() string { return "" }

// Close returns ErrUnsupported.
func (l *Listener) Close() error { return ErrUnsupported }

// Serve returns ErrUnsupported.
func (l *Listener) Serve(ctx context.Context, h Handler) error { return ErrUnsupported }

// Owns returns ErrUnsupported off Linux.
func (p Peer) Owns(f *os.File) error { return ErrUnsupported }

// Dial returns ErrUnsupported off Linux.
func Dial(path string) (*Client, error) { return nil, ErrUnsupported }
