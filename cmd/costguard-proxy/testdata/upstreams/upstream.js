// What yoga.js and apollo.js share: their configuration from the
// environment, the operation counter behind /hits, the requests answered
// before a GraphQL server sees them, and the line announcing the address.
import { createServer } from 'node:http';
import { maxEvents, maxIntervalMs } from './schema.js';

export const graphqlPath = '/graphql';

// readConfig reads the environment; a bad value throws, so a server never
// starts with a setting it would ignore.
export function readConfig(env = process.env) {
  const introspection = env.INTROSPECTION ?? 'on';
  if (introspection !== 'on' && introspection !== 'off') {
    throw new Error(`INTROSPECTION must be on or off, got ${JSON.stringify(introspection)}`);
  }
  return {
    port: integer(env, 'PORT', 0, 0, 65535),
    introspection: introspection === 'on',
    failStatus: integer(env, 'FAIL_STATUS', 0, 400, 599), // 0: off
    issueEvents: integer(env, 'ISSUE_EVENTS', 3, 0, maxEvents),
    issueIntervalMs: integer(env, 'ISSUE_INTERVAL_MS', 20, 0, maxIntervalMs),
  };
}

function integer(env, name, fallback, min, max) {
  const raw = env[name];
  if (raw === undefined || raw === '') {
    return fallback;
  }
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new Error(`${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(raw)}`);
  }
  return n;
}

// Hits counts the GraphQL operations a server executed (over HTTP and
// WebSocket) and keeps the headers of the last HTTP request to the GraphQL
// path and of the last WebSocket upgrade.
export class Hits {
  operations = 0;
  lastHeaders = {};
  lastUpgradeHeaders = {};

  count() {
    this.operations++;
  }

  reset() {
    this.operations = 0;
    this.lastHeaders = {};
    this.lastUpgradeHeaders = {};
  }
}

// createHTTPServer returns a node:http server that answers /hits and
// /hits/reset itself, records the headers of each GraphQL request, answers
// it with config.failStatus when set, and hands the rest to graphql.
export function createHTTPServer(config, hits, graphql) {
  return createServer((req, res) => {
    const path = new URL(req.url, 'http://upstream').pathname;
    if (path === '/hits' && req.method === 'GET') {
      const { operations, lastHeaders, lastUpgradeHeaders } = hits;
      return sendJSON(res, 200, { operations, lastHeaders, lastUpgradeHeaders });
    }
    if (path === '/hits/reset' && req.method === 'POST') {
      hits.reset();
      return sendJSON(res, 200, { operations: 0 });
    }
    if (path === graphqlPath) {
      hits.lastHeaders = { ...req.headers };
      if (config.failStatus) {
        // The body is drained first: answering before reading it can reset
        // the connection under a client still sending.
        req.resume();
        req.on('end', () => sendJSON(res, config.failStatus, failBody(config.failStatus)));
        return;
      }
    }
    graphql(req, res);
  });
}

// failBody is the GraphQL error a FAIL_STATUS answer carries.
function failBody(status) {
  const code = { 401: 'UNAUTHENTICATED', 403: 'FORBIDDEN', 429: 'RATE_LIMITED' }[status] ??
    (status >= 500 ? 'INTERNAL_SERVER_ERROR' : 'BAD_REQUEST');
  return { errors: [{ message: `upstream answers every request with HTTP ${status} (FAIL_STATUS)`, extensions: { code } }] };
}

function sendJSON(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
  res.end(JSON.stringify(body));
}

// recordUpgrades keeps the headers of every WebSocket upgrade a ws server
// accepts.
export function recordUpgrades(wsServer, hits) {
  wsServer.on('connection', (_socket, req) => {
    hits.lastUpgradeHeaders = { ...req.headers };
  });
}

// listen starts server on 127.0.0.1 and, once it accepts connections,
// prints the one line a test waits for: listening http://127.0.0.1:PORT/graphql
export function listen(server, port) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      process.stdout.write(`listening http://127.0.0.1:${server.address().port}${graphqlPath}\n`);
      resolve();
    });
  });
}

// main runs start, exiting with a message on stderr if it fails.
export function main(start) {
  start(readConfig()).catch((err) => {
    process.stderr.write(`${err.stack ?? err}\n`);
    process.exit(1);
  });
}
