'use strict';
// costguard for Apollo's gateway (@apollo/gateway with @apollo/server 4 or 5).
//
// Three pieces, used together (docs/gateways.md):
//
//   clientIdentity(req)     in the server's context function: what the
//                           client is (its address, its credentials), taken
//                           once at the edge.
//   CostguardDataSource     the gateway's data source: sends that identity to
//                           every subgraph, and turns a subgraph's refusal
//                           into a clean GraphQL error (its code, its
//                           retryAfterSeconds, never the subgraph's URL).
//   costguardPlugin()       the server's plugin: answers an operation that a
//                           subgraph refused with that refusal's HTTP status
//                           (429, 503, 401), Retry-After and rate-limit
//                           headers.

const { RemoteGraphQLDataSource } = require('@apollo/gateway');
const { GraphQLError } = require('graphql');

// The context member clientIdentity fills in.
const CONTEXT_KEY = 'costguard';

// The credentials costguard reads, forwarded as the client sent them.
const CREDENTIAL_HEADERS = ['authorization', 'x-api-key'];

// The headers of a refusal that the plugin passes on to the client.
const REFUSAL_HEADERS = [
  'retry-after',
  'ratelimit',
  'ratelimit-policy',
  'x-ratelimit-limit',
  'x-ratelimit-remaining',
  'x-ratelimit-used',
  'x-ratelimit-reset',
];

// Where errorFromResponse leaves the refusal on the error it returns.
const REFUSAL = Symbol('costguard.refusal');

// The refusals each operation met, by its context value: written by the
// data source, read once by the plugin. A WeakMap, so an operation's entry
// goes with its context.
const refusals = new WeakMap();

// The address Node reports for an IPv4 client on a dual-stack socket
// (::ffff:192.0.2.1) is written as IPv4, as the client's own is.
function plainAddress(addr) {
  if (typeof addr !== 'string' || addr === '') return '';
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(addr);
  return m ? m[1] : addr;
}

// clientIdentity returns the context members the data source needs, from
// the incoming request (a Node http.IncomingMessage, the req of
// startStandaloneServer's or expressMiddleware's context function):
//
//   forwardedFor: the X-Forwarded-For the subgraphs receive. The peer
//     address of this connection is appended to whatever the request
//     carried, as every proxy does; a subgraph that trusts only the
//     gateway's addresses reads the header from the right and stops at the
//     first address it does not trust, which is this peer, so a value the
//     client wrote itself is never believed.
//   credentials: the Authorization and X-API-Key headers, as sent.
function clientIdentity(req) {
  if (!req || !req.socket || !req.headers) {
    throw new TypeError('costguard: clientIdentity needs the incoming http request');
  }
  const peer = plainAddress(req.socket.remoteAddress);
  if (peer === '') {
    // A closed socket has no address; forwarding nothing would make the
    // subgraphs charge the gateway's own address.
    throw new Error('costguard: the client connection has no remote address');
  }
  const prior = req.headers['x-forwarded-for'];
  const chain = [].concat(prior || []).join(', ').trim();
  const credentials = {};
  for (const name of CREDENTIAL_HEADERS) {
    const v = req.headers[name];
    if (typeof v === 'string') credentials[name] = v;
  }
  return {
    [CONTEXT_KEY]: {
      forwardedFor: chain === '' ? peer : `${chain}, ${peer}`,
      credentials,
    },
  };
}

// A refusal a subgraph answered, as the plugin needs it.
class Refusal {
  constructor(status, headers, error) {
    this.status = status;
    this.headers = headers; // lower-case name -> value, of REFUSAL_HEADERS
    this.error = error;
    const ra = Number.parseInt(headers['retry-after'] || '', 10);
    this.retryAfter = Number.isFinite(ra) && ra >= 0 ? ra : -1;
  }
}

// The first error of a subgraph's body that carries a code: costguard's
// refusal (RATE_LIMITED, QUOTA_EXCEEDED, FIELD_RATE_LIMITED,
// RATE_LIMITER_UNAVAILABLE, UNKNOWN_API_KEY, MAX_COST_EXCEEDED, ...).
function codedError(body) {
  if (!body || typeof body !== 'object' || !Array.isArray(body.errors)) return undefined;
  return body.errors.find(
    (e) => e && typeof e === 'object' && e.extensions && typeof e.extensions.code === 'string',
  );
}

const DEFAULT_CODES = { 401: 'UNAUTHENTICATED', 403: 'FORBIDDEN' };

// CostguardDataSource is a RemoteGraphQLDataSource that forwards the
// client's identity (clientIdentity) to its subgraph and turns a non-2xx
// answer into an error the client may see: the subgraph's own message,
// extensions.code, retryAfterSeconds and cost, without the subgraph's URL
// or status line that RemoteGraphQLDataSource puts four levels deep.
class CostguardDataSource extends RemoteGraphQLDataSource {
  // A subclass that overrides willSendRequest must call
  // super.willSendRequest(options).
  willSendRequest(options) {
    const { request, context, kind } = options;
    const id = context && context[CONTEXT_KEY];
    if (!id) {
      if (kind === 'incoming operation') {
        // Without it every subgraph would charge the gateway's address:
        // one budget for all clients. Refuse rather than share.
        throw new Error(
          'costguard: the context has no client identity; return clientIdentity(req) from the server\'s context function',
        );
      }
      return; // the gateway's own requests (schema loading, health checks)
    }
    const headers = request.http.headers;
    headers.set('x-forwarded-for', id.forwardedFor);
    for (const name of CREDENTIAL_HEADERS) {
      if (id.credentials[name] !== undefined) headers.set(name, id.credentials[name]);
      else headers.delete(name);
    }
  }

  async errorFromResponse(response) {
    let body;
    try {
      body = await this.parseBody(response);
    } catch {
      body = undefined; // an unreadable body: the status alone says it
    }
    const coded = codedError(body);
    const extensions = {};
    let message = `${this.name ? `Subgraph ${this.name}` : 'A subgraph'} answered ${response.status}`;
    if (coded) {
      message = typeof coded.message === 'string' ? coded.message : message;
      Object.assign(extensions, coded.extensions);
    } else if (DEFAULT_CODES[response.status]) {
      extensions.code = DEFAULT_CODES[response.status];
    }
    const error = new GraphQLError(message, { extensions });
    const headers = {};
    for (const name of REFUSAL_HEADERS) {
      const v = response.headers.get(name);
      if (v !== null) headers[name] = v;
    }
    error[REFUSAL] = new Refusal(response.status, headers, error);
    return error;
  }

  didEncounterError(error, fetchRequest, fetchResponse, context, request) {
    const refusal = error && error[REFUSAL];
    if (refusal && context && typeof context === 'object' && refusal.status >= 400) {
      let list = refusals.get(context);
      if (!list) refusals.set(context, (list = []));
      list.push(refusal);
    }
    super.didEncounterError(error, fetchRequest, fetchResponse, context, request);
  }
}

// The refusal the client hears about: the one with the longest
// Retry-After (the client must wait for every budget that refused), else
// the first.
function decisive(list) {
  let best = list[0];
  for (const r of list) {
    if (r.retryAfter > best.retryAfter) best = r;
  }
  return best;
}

// The statuses a refusal passes on to the client. Others (a subgraph's 500,
// a 502 from a proxy in between) stay the gateway's errors, answered as it
// answers them.
const PASSED_STATUSES = new Set([401, 403, 413, 422, 429, 503]);

// costguardPlugin returns the ApolloServer plugin that answers an operation
// a subgraph refused (through CostguardDataSource) with the refusal's HTTP
// status, its Retry-After and rate-limit headers, and its error first in
// errors. Data the other subgraphs returned stays in the response.
function costguardPlugin() {
  return {
    async requestDidStart() {
      return {
        async willSendResponse(requestContext) {
          const list = refusals.get(requestContext.contextValue);
          if (!list || list.length === 0) return;
          refusals.delete(requestContext.contextValue);
          const chosen = decisive(list.filter((r) => PASSED_STATUSES.has(r.status)));
          if (!chosen) return;
          const { response } = requestContext;
          response.http.status = chosen.status;
          for (const [name, value] of Object.entries(chosen.headers)) {
            response.http.headers.set(name, value);
          }
          const body = response.body;
          if (body && body.kind === 'single' && Array.isArray(body.singleResult.errors)) {
            const errors = body.singleResult.errors;
            const i = errors.findIndex(
              (e) => e && e.extensions && e.extensions.code === chosen.error.extensions.code,
            );
            if (i > 0) errors.unshift(errors.splice(i, 1)[0]);
          }
        },
      };
    },
  };
}

module.exports = { clientIdentity, CostguardDataSource, costguardPlugin, CONTEXT_KEY };
