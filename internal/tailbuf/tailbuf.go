// Package tailbuf keeps the end of what a child process writes, for the
// test harnesses that start servers: a chatty server cannot grow the
// test's memory, and a failure can still show its last lines.
package tailbuf

import (
	"bytes"
	"sync"
)

// Buffer keeps the last Max bytes written to it. It is safe for
// concurrent use.
type Buffer struct {
	Max int

	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if extra := b.buf.Len() - b.Max; extra > 0 {
		b.buf.Next(extra)
	}
	return len(p), nil
}

// String returns what is kept.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
