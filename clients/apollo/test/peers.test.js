// The table "What client libraries do with them today" of docs/clients.md,
// row by row: each client library, at the version devDependencies pins,
// driven against the repository's example server (built and started by the
// test, go on PATH) until refused. node --test test/
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ApolloClient, ApolloLink, CombinedGraphQLErrors, HttpLink, InMemoryCache, gql } from '@apollo/client';
import { RetryLink } from '@apollo/client/link/retry';
import { CombinedError, Client as UrqlClient, fetchExchange } from '@urql/core';
import { retryExchange } from '@urql/exchange-retry';
import { ClientError, GraphQLClient } from 'graphql-request';
import { createClient as createWsClient } from 'graphql-ws';
import { NetworkError, createClient as createSseClient } from 'graphql-sse';
import WebSocket from 'ws';
import { MAX_COST_EXCEEDED, RATE_LIMITED } from '../index.js';
import { aliases, startServer } from '../testserver.js';

// Every test has its own key on a tiny plan: 10 points (the example
// server's dearest REST route), one back a minute, so that once drained a
// refusal's Retry-After is far longer than any client's own retry delay
// and than the whole file.
const tiny = ['apollo', 'urql', 'urqlretry', 'request', 'ws', 'wsmid', 'sse', 'sseretry'];
const config = `plans:
  tiny: {burst: 10, rate: 1, per: 60s}
  roomy: {burst: 1000, rate: 1000, per: 1s}
  publisher: {burst: 100000, rate: 100000, per: 1s}
  anon: {burst: 100, rate: 100, per: 1s}
anonymous_plan: anon
api_keys:
${tiny.map((k) => `  ${k}: {principal: ${k}, plan: tiny}`).join('\n')}
  roomy: {principal: roomy, plan: roomy}
  publisher: {principal: publisher, plan: publisher}
`;

let server;
const post = (...args) => server.post(...args);
const drain = (key) => server.drain(key);
before(async () => {
  server = await startServer(config);
});
after(async () => {
  await server?.stop();
});

const Q = 'query Q { user(login: "octocat") { login } }'; // 1 point
const M = 'mutation M { createIssue(repo: "hello-world", title: "t") { id } }'; // 11 points
const TOO_DEAR = aliases('TooDear', 11); // above the plan's 10 points: never fits
const S = 'subscription S { issueCreated(repo: "hello-world") { id title } }';


// recording is a fetch that records each send (its time) and answer (time,
// status, Retry-After in milliseconds): what the server saw, counted where
// the client hands its requests to the network.
function recording() {
  const sends = [];
  const f = async (input, init) => {
    const s = { sentAt: Date.now() };
    sends.push(s);
    const res = await fetch(input, init);
    Object.assign(s, { at: Date.now(), status: res.status, retryAfterMs: Number(res.headers.get('retry-after')) * 1000 });
    return res;
  };
  return { fetch: f, sends };
}

// reaches reports whether anything reachable from value through own
// properties (enumerable or not) satisfies pred.
function reaches(value, pred, seen = new Set()) {
  if (pred(value)) return true;
  if (value === null || (typeof value !== 'object' && typeof value !== 'function') || seen.has(value)) return false;
  seen.add(value);
  return Reflect.ownKeys(value).some((k) => {
    const d = Object.getOwnPropertyDescriptor(value, k);
    return d && 'value' in d && reaches(d.value, pred, seen);
  });
}

// within rejects with a timeout error unless p settles in ms.
function within(p, ms, what) {
  let timer;
  return Promise.race([
    p,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

// assertRefusal checks a refusal's GraphQL error as the server writes it.
function assertRefusal(e, price) {
  assert.equal(e.extensions.code, RATE_LIMITED, JSON.stringify(e));
  assert.equal(e.extensions.cost, price);
  assert.ok(e.extensions.retryAfterSeconds >= 1, JSON.stringify(e));
}

test('Apollo Client: CombinedGraphQLErrors with the code, cost and retryAfterSeconds; no status, no Retry-After; RetryLink does not retry', async () => {
  const { fetch, sends } = recording();
  const client = new ApolloClient({
    cache: new InMemoryCache(),
    link: ApolloLink.from([new RetryLink(), new HttpLink({ uri: server.url, headers: { 'x-api-key': 'apollo' }, fetch })]),
    defaultOptions: { query: { fetchPolicy: 'network-only' } },
  });
  // An operation above the plan: 400, which the application does not see
  // either. (With the bucket empty the server answers even this one
  // RATE_LIMITED, so it comes first in every test.)
  const dear = await client.query({ query: gql(TOO_DEAR) }).then(() => assert.fail('admitted'), (e) => e);
  assert.ok(CombinedGraphQLErrors.is(dear), String(dear));
  assert.equal(dear.errors[0].extensions.code, MAX_COST_EXCEEDED);
  assert.equal(sends.length, 1);
  assert.equal(sends[0].status, 400);
  assert.ok(!reaches(dear, (v) => v === 400 || v instanceof Response || v instanceof Headers));

  await drain('apollo');
  const err = await client.query({ query: gql(Q) }).then(() => assert.fail('admitted'), (e) => e);
  assert.ok(CombinedGraphQLErrors.is(err), String(err));
  assertRefusal(err.errors[0], 1);
  assert.equal(err.errors[0].extensions.retryAfterSeconds * 1000, sends[1].retryAfterMs, 'retryAfterSeconds is what Retry-After says');
  assert.equal(sends.length, 2, 'RetryLink sent it again');
  assert.equal(sends[1].status, 429);
  assert.ok(!reaches(err, (v) => v === 429 || v instanceof Response || v instanceof Headers), 'the status or the headers reached the application');
});

test('Apollo Client: a successful query result drops extensions, a mutation result keeps them', async () => {
  const client = new ApolloClient({
    cache: new InMemoryCache(),
    link: new HttpLink({ uri: server.url, headers: { 'x-api-key': 'roomy' } }),
    defaultOptions: { query: { fetchPolicy: 'network-only' } },
  });
  const q = await client.query({ query: gql(Q) });
  assert.equal(q.data.user.login, 'octocat');
  assert.ok(!reaches(q, (v) => v !== null && typeof v === 'object' && 'requestedQueryCost' in v), 'extensions.cost reached the application');
  const m = await client.mutate({ mutation: gql(M) });
  assert.match(m.data.createIssue.id, /^I_/);
  assert.equal(m.extensions.cost.requestedQueryCost, 11);
});

test('urql: CombinedError with the status and Retry-After; retryExchange retries only when told to, on its own delays', async (t) => {
  // The default retryIf: network errors only, and a refusal is a GraphQL error.
  const plain = recording();
  const client = new UrqlClient({
    url: server.url,
    exchanges: [retryExchange({}), fetchExchange],
    fetch: plain.fetch,
    fetchOptions: { headers: { 'x-api-key': 'urql' } },
    requestPolicy: 'network-only',
  });
  const dear = await client.query(TOO_DEAR, {}).toPromise();
  assert.equal(dear.error.graphQLErrors[0].extensions.code, MAX_COST_EXCEEDED);
  assert.equal(dear.error.response.status, 400);

  await drain('urql');
  const r = await client.query(Q, {}).toPromise();
  assert.ok(r.error instanceof CombinedError, String(r.error));
  assert.equal(r.error.networkError, undefined);
  assertRefusal(r.error.graphQLErrors[0], 1);
  assert.equal(r.error.response.status, 429);
  assert.equal(Number(r.error.response.headers.get('retry-after')) * 1000, plain.sends[1].retryAfterMs);
  assert.equal(plain.sends.length, 2, 'retried without being told to');

  // Told to retry a refusal: two retries, each on the exchange's own
  // backoff, long before Retry-After has run out.
  const told = recording();
  const retrying = new UrqlClient({
    url: server.url,
    exchanges: [
      retryExchange({
        initialDelayMs: 200,
        maxNumberAttempts: 3,
        retryIf: (e) => e.graphQLErrors.some((g) => g.extensions?.code === RATE_LIMITED),
      }),
      fetchExchange,
    ],
    fetch: told.fetch,
    fetchOptions: { headers: { 'x-api-key': 'urqlretry' } },
    requestPolicy: 'network-only',
  });
  await drain('urqlretry');
  const rr = await within(retrying.query(Q, {}).toPromise(), 10_000, 'urql');
  assert.equal(rr.error.graphQLErrors[0].extensions.code, RATE_LIMITED);
  assert.deepEqual(told.sends.map((s) => s.status), [429, 429, 429]);
  const first = told.sends[0];
  assert.ok(first.retryAfterMs >= 10_000, `Retry-After ${first.retryAfterMs} ms`);
  for (const s of told.sends.slice(1)) {
    assert.ok(s.sentAt < first.at + first.retryAfterMs, `retried ${s.sentAt - first.at} ms after a Retry-After of ${first.retryAfterMs} ms`);
  }
  t.diagnostic(`urql retried at ${told.sends.slice(1).map((s) => `+${s.sentAt - first.at} ms`).join(' and ')} while Retry-After said ${first.retryAfterMs / 1000} s`);
});

test('graphql-request: ClientError with the status and the headers; no retry', async () => {
  const { fetch, sends } = recording();
  const client = new GraphQLClient(server.url, { headers: { 'x-api-key': 'request' }, fetch });
  const dear = await client.request(TOO_DEAR).then(() => assert.fail('admitted'), (e) => e);
  assert.ok(dear instanceof ClientError);
  assert.equal(dear.response.errors[0].extensions.code, MAX_COST_EXCEEDED);
  assert.equal(dear.response.status, 400);

  await drain('request');
  const err = await client.request(Q).then(() => assert.fail('admitted'), (e) => e);
  assert.ok(err instanceof ClientError, String(err));
  assertRefusal(err.response.errors[0], 1);
  assert.equal(err.response.status, 429);
  assert.equal(Number(err.response.headers.get('retry-after')) * 1000, sends[1].retryAfterMs);
  assert.equal(sends.length, 2);
});

// wsClient is a graphql-ws client for key that records the time of each
// subscribe message it sends and resolves closed when its socket closes.
function wsClient(key) {
  const subscribes = [];
  class RecordingWebSocket extends WebSocket {
    send(data, ...rest) {
      if (JSON.parse(String(data)).type === 'subscribe') subscribes.push(Date.now());
      return super.send(data, ...rest);
    }
  }
  let onClosed;
  const closed = new Promise((resolve) => {
    onClosed = resolve;
  });
  const client = createWsClient({
    url: server.wsURL,
    webSocketImpl: RecordingWebSocket,
    connectionParams: { apiKey: key },
    retryAttempts: 0,
    on: { closed: onClosed },
  });
  return { client, subscribes, closed };
}

// subscribing subscribes to S and records what the sink gets; done
// resolves on its error or complete, and publishing(until) publishes an
// issue every 200 ms until until() holds or the subscription ends, for 5 s
// at most.
function subscribing(client) {
  const got = [];
  let wake = () => {};
  const done = new Promise((resolve) => {
    client.subscribe({ query: S }, {
      next: (v) => {
        got.push({ next: v });
        wake();
      },
      error: (e) => {
        got.push({ error: e });
        resolve();
      },
      complete: () => {
        got.push({ complete: true });
        resolve();
      },
    });
  });
  let ended = false;
  done.then(() => {
    ended = true;
  });
  const publishing = async (until) => {
    const deadline = Date.now() + 5000;
    while (!until() && !ended) {
      if (Date.now() > deadline) throw new Error(`published for 5 s; the sink got ${JSON.stringify(got)}`);
      await post('publisher', `mutation { createIssue(repo: "hello-world", title: "e${got.length}") { id } }`);
      await new Promise((resolve) => {
        wake = resolve;
        setTimeout(resolve, 200);
      });
    }
  };
  return { got, done, publishing };
}

test('graphql-ws: a refusal at subscribe is the error array through the sink\'s error; not subscribed again', async () => {
  const { client, subscribes, closed } = wsClient('ws');
  try {
    await drain('ws');
    const { got, done } = subscribing(client);
    await within(done, 5000, 'the sink');
    assert.equal(got.length, 1, JSON.stringify(got));
    assert.ok(Array.isArray(got[0].error), `the sink's error got ${got[0].error}`);
    assertRefusal(got[0].error[0], 1);
    // Lazy: with no subscription left the client closes its socket, so a
    // subscribe sent again would have come before this.
    await within(closed, 5000, 'the socket');
    assert.equal(subscribes.length, 1);
  } finally {
    await client.dispose();
  }
});

test('graphql-ws: a refusal mid-stream is an ordinary next carrying RATE_LIMITED, then complete; not subscribed again', async () => {
  const { client, subscribes, closed } = wsClient('wsmid');
  try {
    const { got, done, publishing } = subscribing(client);
    await publishing(() => got.length > 0);
    await drain('wsmid');
    await publishing(() => false);
    await done;
    // Every event the budget paid, then the one it could not, then complete.
    const [refused, last] = got.slice(-2);
    assert.deepEqual(last, { complete: true }, JSON.stringify(got));
    assert.equal(refused.next.data ?? null, null, JSON.stringify(refused));
    assert.equal(refused.next.errors[0].extensions.code, RATE_LIMITED, JSON.stringify(refused));
    assert.ok(refused.next.errors[0].extensions.retryAfterSeconds >= 1);
    const paid = got.slice(0, -2);
    assert.ok(paid.length >= 1 && paid.every((g) => g.next?.data?.issueCreated.id), JSON.stringify(got));
    await within(closed, 5000, 'the socket');
    assert.equal(subscribes.length, 1);
  } finally {
    await client.dispose();
  }
});

// sseQuery runs Q through a graphql-sse client and resolves with what its
// sink got, up to its error or complete.
function sseQuery(client) {
  return new Promise((resolve) => {
    const got = [];
    client.subscribe({ query: Q }, {
      next: (v) => got.push({ next: v }),
      error: (e) => resolve([...got, { error: e }]),
      complete: () => resolve([...got, { complete: true }]),
    });
  });
}

test('graphql-sse, retries off: a NetworkError with the status and Retry-After, the body unread', async () => {
  const { fetch, sends } = recording();
  const client = createSseClient({ url: server.url, headers: { 'x-api-key': 'sse' }, fetchFn: fetch, retryAttempts: 0 });
  try {
    await drain('sse');
    const got = await within(sseQuery(client), 5000, 'the sink');
    assert.equal(got.length, 1, JSON.stringify(got));
    const err = got[0].error;
    assert.ok(err instanceof NetworkError, String(err));
    assert.equal(err.response.status, 429);
    assert.equal(Number(err.response.headers.get('retry-after')) * 1000, sends[0].retryAfterMs);
    assert.equal(err.response.bodyUsed, false, 'the client read the body');
    assert.ok(!reaches(err, (v) => v === RATE_LIMITED), 'the code reached the application without reading the body');
    // It is there for an application that reads the stream itself: a
    // next event with the refusal, then complete.
    assert.match(err.response.headers.get('content-type'), /^text\/event-stream/);
    const body = await err.response.text();
    const events = [...body.matchAll(/^event: (\w+)\n(?:data: (.*)\n)?/gm)].map((m) => [m[1], m[2] && JSON.parse(m[2])]);
    assert.deepEqual(events.map(([e]) => e), ['next', 'complete'], body);
    assertRefusal(events[0][1].errors[0], 1);
    assert.equal(sends.length, 1);
  } finally {
    client.dispose();
  }
});

test('graphql-sse, retries on: nothing reaches the application while it retries on its own backoff, before Retry-After', async (t) => {
  const { fetch, sends } = recording();
  // One retry, on the default backoff (1 s plus 0.3 to 3 s at first).
  const client = createSseClient({ url: server.url, headers: { 'x-api-key': 'sseretry' }, fetchFn: fetch, retryAttempts: 1 });
  try {
    await drain('sseretry');
    const got = await within(sseQuery(client), 8000, 'the sink');
    assert.equal(got.length, 1, `the application saw ${JSON.stringify(got)}`);
    assert.ok(got[0].error instanceof NetworkError, 'once the retries are spent');
    assert.deepEqual(sends.map((s) => s.status), [429, 429]);
    const [first, again] = sends;
    assert.ok(first.retryAfterMs >= 10_000, `Retry-After ${first.retryAfterMs} ms`);
    assert.ok(again.sentAt < first.at + first.retryAfterMs, `retried ${again.sentAt - first.at} ms after a Retry-After of ${first.retryAfterMs} ms`);
    t.diagnostic(`graphql-sse retried at +${again.sentAt - first.at} ms while Retry-After said ${first.retryAfterMs / 1000} s`);
  } finally {
    client.dispose();
  }
});
