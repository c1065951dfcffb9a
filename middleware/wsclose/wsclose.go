// Package wsclose closes a WebSocket connection that costguard's
// WebsocketInit refuses with the refusal's close code: 4403 for an unknown
// API key, 4500 when the key lookup fails.
//
//	srv.AddTransport(transport.Websocket{InitFunc: wsclose.InitFunc(lim.WebsocketInit(nil))})
//
// It needs gqlgen v0.17.92 or later (transport.WithWebsocketCloseCode), so
// it is a module of its own: the core (github.com/costguard/costguard)
// builds with older releases, and a project that does not import this
// module keeps whichever gqlgen it has. Without it a refused connection
// gets the refusal's message and closes with 1000 (normal closure).
package wsclose

import (
	"context"
	"errors"

	"github.com/99designs/gqlgen/graphql/handler/transport"
)

// closeCoder is an error that names the close code it deserves, as
// middleware.SocketError does.
type closeCoder interface {
	error
	CloseCode() int
}

// InitFunc wraps init so that an error of init naming a close code (a
// *middleware.SocketError) closes the connection with that code. Any other
// result passes through unchanged.
func InitFunc(init transport.WebsocketInitFunc) transport.WebsocketInitFunc {
	return func(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		ctx, ack, err := init(ctx, payload)
		if c, ok := errors.AsType[closeCoder](err); ok {
			ctx = transport.WithWebsocketCloseCode(ctx, c.CloseCode())
		}
		return ctx, ack, err
	}
}
