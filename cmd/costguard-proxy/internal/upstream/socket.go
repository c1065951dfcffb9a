package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// The graphql-transport-ws protocol: the subprotocol and its messages.
const (
	transportWS       = "graphql-transport-ws"
	msgConnectionInit = "connection_init"
	msgConnectionAck  = "connection_ack"
	msgPing           = "ping"
	msgPong           = "pong"
	msgSubscribe      = "subscribe"
	msgNext           = "next"
	msgError          = "error"
	msgComplete       = "complete"
	// subscriptionID names the one operation each upstream socket carries.
	subscriptionID = "1"
	// writeWait bounds one write to the upstream socket.
	writeWait = 10 * time.Second
)

type wsMessage struct {
	ID      string `json:"id,omitempty"`
	Type    string `json:"type"`
	Payload any    `json:"payload,omitempty"`
}

type wsIncoming struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

// subscribe returns the responses of a subscription: the upstream socket
// is opened at the first call, each call then returns the next event, the
// errors of an upstream error message come as a last response, and nil
// follows the upstream's complete or the end of ctx (the client
// unsubscribed or left), which closes the upstream socket.
func (f *Forwarder) subscribe(opCtx *graphql.OperationContext) graphql.ResponseHandler {
	var s *stream
	finished := false
	return func(ctx context.Context) *graphql.Response {
		if finished {
			return nil
		}
		if s == nil {
			if withheld(ctx, opCtx) {
				finished = true
				return &graphql.Response{Data: json.RawMessage("null")}
			}
			var err error
			if s, err = f.open(ctx, opCtx); err != nil {
				finished = true
				return f.unavailable(ctx, failure(err), err)
			}
		}
		select {
		case resp, ok := <-s.events:
			if !ok {
				finished = true
				return nil
			}
			return deliver(ctx, resp)
		case <-ctx.Done():
			finished = true
			return nil
		}
	}
}

// stream is one subscription's upstream socket. Its reading goroutine
// owns the connection: it ends, closing the connection and events, when
// the upstream completes or fails or when the subscription's context ends.
type stream struct {
	conn    *websocket.Conn
	writeMu sync.Mutex // one writer at a time: gorilla allows no more
	events  chan *graphql.Response
}

// open dials the upstream, waits for its connection_ack and subscribes,
// all within the handshake timeout. An error before the subscribe message
// is written wraps ErrNotExecuted.
func (f *Forwarder) open(ctx context.Context, opCtx *graphql.OperationContext) (*stream, error) {
	hctx, cancel := context.WithTimeout(ctx, f.handshake)
	defer cancel()
	dialer := websocket.Dialer{
		Proxy:            http.ProxyFromEnvironment,
		HandshakeTimeout: f.handshake,
		Subprotocols:     []string{transportWS},
	}
	conn, resp, err := dialer.DialContext(hctx, f.wsURL, f.requestHeaders(ctx, opCtx))
	if err != nil {
		if resp != nil {
			err = fmt.Errorf("%w: the WebSocket handshake was answered with status %d", errHandshake, resp.StatusCode)
		}
		return nil, fmt.Errorf("%w: %w", ErrNotExecuted, err)
	}
	s := &stream{conn: conn, events: make(chan *graphql.Response)}
	// The wait for the ack ends with the handshake's context: closing the
	// connection ends the read.
	stopHandshake := context.AfterFunc(hctx, func() { _ = conn.Close() })
	err = s.handshake(f.initPayload(ctx))
	if !stopHandshake() && err == nil {
		err = hctx.Err()
	}
	if err != nil {
		_ = conn.Close()
		if hctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", hctx.Err(), err)
		}
		return nil, fmt.Errorf("%w: %w", ErrNotExecuted, err)
	}
	conn.SetReadLimit(f.maxBytes)
	if err := s.write(wsMessage{ID: subscriptionID, Type: msgSubscribe, Payload: request{
		Query: opCtx.RawQuery, OperationName: opCtx.OperationName, Variables: opCtx.Variables,
	}}); err != nil {
		_ = conn.Close()
		return nil, err
	}
	stop := context.AfterFunc(ctx, s.unsubscribe)
	go s.read(ctx, stop)
	return s, nil
}

// errHandshake is an upstream that does not accept the socket or speaks
// another protocol.
var errHandshake = errors.New("upstream: WebSocket handshake failed")

// handshake sends connection_init and reads up to the connection_ack,
// answering pings.
func (s *stream) handshake(payload map[string]any) error {
	if s.conn.Subprotocol() != transportWS {
		return fmt.Errorf("%w: the upstream does not speak %s", errHandshake, transportWS)
	}
	if err := s.write(wsMessage{Type: msgConnectionInit, Payload: payload}); err != nil {
		return err
	}
	s.conn.SetReadLimit(64 << 10) // an ack, a ping: small
	for {
		m, err := s.next()
		if err != nil {
			return err
		}
		switch m.Type {
		case msgConnectionAck:
			return nil
		case msgPing:
			if err := s.write(wsMessage{Type: msgPong}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: %q before connection_ack", errHandshake, m.Type)
		}
	}
}

// initPayload is the upstream's connection_init payload: the entries of
// the client's whose keys name a forwarded header.
func (f *Forwarder) initPayload(ctx context.Context) map[string]any {
	payload := map[string]any{}
	for key, value := range transport.GetInitPayload(ctx) {
		if f.forwardKey[strings.ToLower(key)] {
			payload[key] = value
		}
	}
	return payload
}

func (s *stream) next() (wsIncoming, error) {
	var m wsIncoming
	_, b, err := s.conn.ReadMessage()
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Type == "" {
		return m, fmt.Errorf("%w: a message that is not graphql-transport-ws", errHandshake)
	}
	return m, nil
}

func (s *stream) write(m wsMessage) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(writeWait))
	return s.conn.WriteJSON(m)
}

// unsubscribe runs when the subscription's context ends: it tells the
// upstream, then closes the socket, which ends read.
func (s *stream) unsubscribe() {
	_ = s.write(wsMessage{ID: subscriptionID, Type: msgComplete})
	_ = s.conn.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(writeWait))
	_ = s.conn.Close()
}

// read turns the upstream's messages into responses until the
// subscription ends; stop cancels the unsubscribe of open.
func (s *stream) read(ctx context.Context, stop func() bool) {
	defer close(s.events)
	defer s.conn.Close()
	defer stop()
	for {
		m, err := s.next()
		if err != nil {
			if ctx.Err() == nil {
				s.send(ctx, lost(failureOf(err), err))
			}
			return
		}
		if m.ID != "" && m.ID != subscriptionID {
			continue
		}
		switch m.Type {
		case msgNext:
			resp, err := decodeResponse(m.Payload)
			if err != nil {
				s.send(ctx, lost("an event that is not a GraphQL response", err))
				return
			}
			if !s.send(ctx, resp) {
				return
			}
		case msgError:
			var errs gqlerror.List
			if err := decodeNumbers(m.Payload, &errs); err != nil || len(errs) == 0 {
				s.send(ctx, lost("an error message without errors", err))
				return
			}
			s.send(ctx, &graphql.Response{Errors: errs})
			return
		case msgComplete:
			return
		case msgPing:
			if err := s.write(wsMessage{Type: msgPong}); err != nil {
				if ctx.Err() == nil {
					s.send(ctx, lost(failureOf(err), err))
				}
				return
			}
		}
	}
}

// send hands resp to the subscription's handler, unless the subscription
// ended first.
func (s *stream) send(ctx context.Context, resp *graphql.Response) bool {
	select {
	case s.events <- resp:
		return true
	case <-ctx.Done():
		return false
	}
}

// lost is the last response of a subscription whose upstream failed after
// it subscribed: the upstream may have run it, so no ErrNotExecuted.
func lost(reason string, cause error) *graphql.Response {
	return &graphql.Response{Errors: gqlerror.List{unavailableError(reason, cause)}}
}

// failureOf is failure for a socket: a close frame says why.
func failureOf(err error) string {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		if ce.Code == websocket.CloseMessageTooBig {
			return "the event is too large"
		}
		return fmt.Sprintf("the upstream closed the subscription (%d)", ce.Code)
	}
	if errors.Is(err, websocket.ErrReadLimit) {
		return "the event is too large"
	}
	return failure(err)
}
