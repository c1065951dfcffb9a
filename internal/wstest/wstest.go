// Package wstest is the WebSocket client of the tests: enough of RFC 6455 to
// open a connection with a subprotocol (and, to test the server's
// handshake, a body), exchange JSON text messages and read the close code.
// It keeps the library's module free of a WebSocket package that only
// tests would use, and it speaks to whichever WebSocket implementation the
// gqlgen in the build has (gorilla's up to v0.17.9x, coder's after).
package wstest

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Opcodes of RFC 6455, section 5.2.
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA
)

// maxMessage bounds a message the client reads.
const maxMessage = 16 << 20

// DialOptions are what a connection opens with.
type DialOptions struct {
	Subprotocols []string
	Header       http.Header
	// Body, when not nil, is sent as a chunked body of the upgrade request,
	// which no server should read.
	Body []byte
}

// A Conn is one client connection. Reads and writes may run concurrently
// with each other, each from one goroutine at a time.
type Conn struct {
	nc          net.Conn
	br          *bufio.Reader
	wmu         sync.Mutex
	Subprotocol string // the one the server chose
}

// A CloseError is the close frame that ended a connection.
type CloseError struct {
	Code   int
	Reason string
}

func (e *CloseError) Error() string {
	return fmt.Sprintf("websocket closed: status %d %q", e.Code, e.Reason)
}

// CloseStatus is the code of the close frame err carries, or -1.
func CloseStatus(err error) int {
	var ce *CloseError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return -1
}

// Dial opens a connection to rawURL (ws:// or http://). A refused
// handshake is an error naming the response's status.
func Dial(ctx context.Context, rawURL string, opts DialOptions) (*Conn, *http.Response, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, err
	}
	switch u.Scheme {
	case "ws", "http":
	default:
		return nil, nil, fmt.Errorf("wstest: scheme %q: only ws and http", u.Scheme)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	c, resp, err := handshake(nc, u, opts)
	if err != nil {
		_ = nc.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return nil, resp, err
	}
	return c, resp, nil
}

func handshake(nc net.Conn, u *url.URL, opts DialOptions) (*Conn, *http.Response, error) {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	key := base64.StdEncoding.EncodeToString(nonce[:])
	path := u.RequestURI()
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n", path, u.Host)
	fmt.Fprintf(&b, "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n", key)
	if len(opts.Subprotocols) > 0 {
		fmt.Fprintf(&b, "Sec-WebSocket-Protocol: %s\r\n", strings.Join(opts.Subprotocols, ", "))
	}
	for name, values := range opts.Header {
		for _, v := range values {
			fmt.Fprintf(&b, "%s: %s\r\n", name, v)
		}
	}
	if opts.Body != nil {
		fmt.Fprintf(&b, "Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(opts.Body), opts.Body)
	} else {
		b.WriteString("\r\n")
	}
	if _, err := io.WriteString(nc, b.String()); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet, URL: u})
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, resp, fmt.Errorf("wstest: handshake answered %s: %s", resp.Status, body)
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if got := resp.Header.Get("Sec-WebSocket-Accept"); got != base64.StdEncoding.EncodeToString(sum[:]) {
		return nil, resp, fmt.Errorf("wstest: Sec-WebSocket-Accept %q does not answer the key", got)
	}
	return &Conn{nc: nc, br: br, Subprotocol: resp.Header.Get("Sec-WebSocket-Protocol")}, resp, nil
}

// WriteJSON sends v as one text message.
func (c *Conn) WriteJSON(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.write(ctx, opText, b)
}

// ReadJSON reads the next text message into v. A close frame from the
// server is a *CloseError; a ping is answered.
func (c *Conn) ReadJSON(ctx context.Context, v any) error {
	b, err := c.Read(ctx)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Read returns the next data message.
func (c *Conn) Read(ctx context.Context) ([]byte, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetReadDeadline(time.Now()) })
	defer func() {
		if stop() {
			return
		}
		_ = c.nc.SetReadDeadline(time.Time{}) // the context ended: later reads may still come
	}()
	var msg []byte
	for {
		fin, op, payload, err := c.frame()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", ctx.Err(), err)
			}
			return nil, err
		}
		switch op {
		case opPing:
			if err := c.write(ctx, opPong, payload); err != nil {
				return nil, err
			}
			continue
		case opPong:
			continue
		case opClose:
			ce := &CloseError{Code: 1005}
			if len(payload) >= 2 {
				ce.Code, ce.Reason = int(binary.BigEndian.Uint16(payload)), string(payload[2:])
			}
			_ = c.write(ctx, opClose, payload[:min(2, len(payload))])
			_ = c.nc.Close()
			return nil, ce
		case opText, opBinary, opContinuation:
			if len(msg)+len(payload) > maxMessage {
				return nil, errors.New("wstest: message too large")
			}
			msg = append(msg, payload...)
			if fin {
				return msg, nil
			}
		default:
			return nil, fmt.Errorf("wstest: opcode %#x", op)
		}
	}
}

// frame reads one frame (the server's are unmasked).
func (c *Conn) frame() (fin bool, op byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(c.br, h[:]); err != nil {
		return
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0F
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var ext [2]byte
		if _, err = io.ReadFull(c.br, ext[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		var ext [8]byte
		if _, err = io.ReadFull(c.br, ext[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(ext[:])
	}
	if n > maxMessage {
		return false, 0, nil, errors.New("wstest: frame too large")
	}
	var mask [4]byte
	masked := h[1]&0x80 != 0
	if masked {
		if _, err = io.ReadFull(c.br, mask[:]); err != nil {
			return
		}
	}
	payload = make([]byte, n)
	if _, err = io.ReadFull(c.br, payload); err != nil {
		return
	}
	if masked {
		for i := range payload {
			payload[i] ^= mask[i%4]
		}
	}
	return fin, op, payload, nil
}

// write sends one masked frame, as a client must.
func (c *Conn) write(ctx context.Context, op byte, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetWriteDeadline(time.Now()) })
	defer func() {
		if !stop() {
			_ = c.nc.SetWriteDeadline(time.Time{})
		}
	}()
	frame := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		frame = append(frame, 0x80|byte(n))
	case n <= 0xFFFF:
		frame = append(frame, 0x80|126)
		frame = binary.BigEndian.AppendUint16(frame, uint16(n))
	default:
		frame = append(frame, 0x80|127)
		frame = binary.BigEndian.AppendUint64(frame, uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	frame = append(frame, mask[:]...)
	for i, b := range payload {
		frame = append(frame, b^mask[i%4])
	}
	_, err := c.nc.Write(frame)
	return err
}

// Close sends a normal closure and closes the connection without waiting
// for the server's answer.
func (c *Conn) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.write(ctx, opClose, []byte{0x03, 0xE8}) // 1000
	return c.nc.Close()
}

// CloseNow closes the connection without a close frame.
func (c *Conn) CloseNow() error { return c.nc.Close() }
