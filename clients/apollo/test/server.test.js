// The link through a real ApolloClient against the repository's example
// server, built and started by the test (go on PATH): node --test test/
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ApolloClient, ApolloLink, CombinedGraphQLErrors, HttpLink, InMemoryCache, gql } from '@apollo/client';
import { GraphQLWsLink } from '@apollo/client/link/subscriptions';
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';
import { MAX_COST_EXCEEDED, RATE_LIMITED, budgetOf, createCostLink } from '../index.js';
import { aliases, startServer } from '../testserver.js';

// Every test has its own key, so its own bucket of 20 points: "slow"
// refills 2 points a second, "fast" 10.
const keys = ['success', 'refusal', 'json', 'jsonretry', 'retry', 'mutation', 'safe', 'maxcost', 'pacing', 'subscription', 'abort'];
const config = `plans:
  slow: {burst: 20, rate: 20, per: 10s}
  fast: {burst: 20, rate: 10, per: 1s}
  publisher: {burst: 100000, rate: 100000, per: 1s}
  anon: {burst: 100, rate: 100, per: 1s}
anonymous_plan: anon
api_keys:
${keys.map((k) => `  ${k}: {principal: ${k}, plan: ${['safe', 'pacing'].includes(k) ? 'fast' : 'slow'}}`).join('\n')}
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

const Q = gql`query Q { user(login: "octocat") { login } }`; // 1 point
const M = gql`mutation M { createIssue(repo: "hello-world", title: "t") { id } }`; // 11 points
const BIG = gql(aliases('Big', 20)); // 20 points
const HUGE = gql`query Huge { user(login: "octocat") { repos(first: 50) { issues(first: 50) { title } } } }`; // 2551 points
const S = gql`subscription S { issueCreated(repo: "hello-world") { id title } }`;


// apollo is an ApolloClient with the link before an HttpLink whose fetch
// records each send (its time) and answer (time, status, Retry-After).
function apollo(key, link, headers = {}) {
  const sends = [];
  const recordingFetch = async (input, init) => {
    const s = { sentAt: Date.now() };
    sends.push(s);
    const res = await fetch(input, init);
    Object.assign(s, { at: Date.now(), status: res.status, retryAfter: res.headers.get('retry-after') });
    return res;
  };
  const client = new ApolloClient({
    cache: new InMemoryCache(),
    link: ApolloLink.from([link, new HttpLink({ uri: server.url, headers: { 'x-api-key': key, ...headers }, fetch: recordingFetch })]),
    defaultOptions: { query: { fetchPolicy: 'network-only' } },
  });
  return { client, sends };
}

test('a successful query and mutation show extensions.cost, the status and the budget', async () => {
  const link = createCostLink();
  const { client } = apollo('success', link);
  const cg = {};
  const q = await client.query({ query: Q, context: { costguard: cg } });
  assert.equal(q.data.user.login, 'octocat');
  assert.equal(q.extensions, undefined, 'Apollo Client 4 drops a query result\'s extensions');
  assert.equal(cg.response.status, 200);
  assert.equal(cg.response.code, null);
  assert.equal(cg.response.cost.requestedQueryCost, 1);
  assert.equal(cg.response.cost.throttleStatus.maximumAvailable, 20);
  assert.equal(cg.response.policy, 'slow');
  assert.equal(cg.response.limit, 20);
  assert.equal(cg.response.remaining, 19);
  assert.equal(cg.response.restoreRate, 2);

  const seen = [];
  const m = await client.mutate({ mutation: M, context: { costguard: { onResponse: (i) => seen.push(i) } } });
  assert.match(m.data.createIssue.id, /^I_/);
  assert.equal(m.extensions.cost.requestedQueryCost, 11);
  assert.equal(budgetOf(m).status, 200);
  assert.equal(budgetOf(m).remaining, 8);
  assert.deepEqual(seen, [budgetOf(m)]);

  const view = link.snapshot();
  assert.equal(view.limit, 20);
  assert.equal(view.observedRemaining, 8);
  assert.deepEqual(view.prices, { Q: 1, M: 11 });
  assert.equal(link.lastPrice('M'), 11);
});

test('a refusal shows the status, Retry-After, the code, the cost and retryAfterSeconds', async () => {
  const { client, sends } = apollo('refusal', createCostLink({ maxRetries: 0 }));
  await drain('refusal');
  const err = await client.query({ query: Q }).then(() => assert.fail('admitted'), (e) => e);
  assert.ok(CombinedGraphQLErrors.is(err), String(err));
  assert.equal(err.errors[0].extensions.code, RATE_LIMITED);
  assert.equal(err.errors[0].extensions.cost, 1);
  const info = budgetOf(err);
  assert.equal(info.status, 429);
  assert.equal(info.code, RATE_LIMITED);
  assert.equal(info.retryAfter, Number(sends[0].retryAfter));
  assert.ok(info.retryAfter >= 1);
  assert.equal(info.price, 1);
  assert.equal(err.extensions.cost.requestedQueryCost, 1);
  assert.equal(sends.length, 1);
});

test('a refusal in application/json (a ServerError in Apollo Client) is read and retried as well', async () => {
  const link = createCostLink({ maxRetries: 0 });
  const { client, sends } = apollo('json', link, { accept: 'application/json' });
  await drain('json');
  const err = await client.query({ query: Q }).then(() => assert.fail('admitted'), (e) => e);
  assert.equal(err.name, 'ServerError');
  assert.equal(budgetOf(err).status, 429);
  assert.equal(budgetOf(err).code, RATE_LIMITED);
  assert.equal(budgetOf(err).retryAfter, Number(sends[0].retryAfter));
  assert.equal(budgetOf(err).remaining, 0);
  assert.ok(link.snapshot().blockedFor > 0);

  const seen = [];
  const retrying = apollo('jsonretry', createCostLink({ onResponse: (i) => seen.push(i) }), { accept: 'application/json' });
  await drain('jsonretry');
  const q = await retrying.client.query({ query: Q });
  assert.equal(q.data.user.login, 'octocat');
  assert.deepEqual(retrying.sends.map((x) => x.status), [429, 200]);
  assert.deepEqual(seen.map((i) => [i.status, i.code, i.attempt]), [[429, RATE_LIMITED, 1], [200, null, 2]]);
  assert.ok(retrying.sends[1].sentAt >= retrying.sends[0].at + Number(retrying.sends[0].retryAfter) * 1000);
});

test('a refused query is sent again only once Retry-After has passed', async () => {
  const link = createCostLink();
  const { client, sends } = apollo('retry', link);
  await drain('retry');
  const cg = {};
  const q = await client.query({ query: Q, context: { costguard: cg } });
  assert.equal(q.data.user.login, 'octocat');
  assert.equal(sends.length, 2);
  assert.equal(sends[0].status, 429);
  assert.equal(sends[1].status, 200);
  const wait = Number(sends[0].retryAfter) * 1000;
  assert.ok(wait >= 1000);
  assert.ok(sends[1].sentAt >= sends[0].at + wait, `sent again ${sends[1].sentAt - sends[0].at} ms after a Retry-After of ${wait} ms`);
  assert.equal(cg.response.attempt, 2);
  assert.equal(cg.response.status, 200);
});

test('a refused mutation is not retried', async () => {
  const { client, sends } = apollo('mutation', createCostLink());
  await drain('mutation');
  const err = await client.mutate({ mutation: M }).then(() => assert.fail('admitted'), (e) => e);
  assert.equal(budgetOf(err).code, RATE_LIMITED);
  assert.equal(budgetOf(err).status, 429);
  assert.equal(sends.length, 1);
});

test('a mutation marked retrySafe is retried, after Retry-After', async () => {
  const { client, sends } = apollo('safe', createCostLink());
  await drain('safe');
  const m = await client.mutate({ mutation: M, context: { costguard: { retrySafe: true } } });
  assert.equal(budgetOf(m).attempt, 2);
  assert.deepEqual(sends.map((s) => s.status), [429, 200]);
  assert.ok(sends[1].sentAt >= sends[0].at + Number(sends[0].retryAfter) * 1000);
});

test('MAX_COST_EXCEEDED is never retried', async () => {
  const { client, sends } = apollo('maxcost', createCostLink());
  for (let i = 0; i < 2; i++) {
    const err = await client.query({ query: HUGE }).then(() => assert.fail('admitted'), (e) => e);
    assert.equal(budgetOf(err).code, MAX_COST_EXCEEDED);
    assert.equal(budgetOf(err).status, 400);
    assert.equal(budgetOf(err).price, 2551);
    assert.equal(budgetOf(err).waited, 0, 'a price above the plan is not held: it never fits');
  }
  assert.equal(sends.length, 2);
});

test('an operation whose price is known waits until the budget fits it', async () => {
  const link = createCostLink();
  const { client, sends } = apollo('pacing', link);
  const first = {};
  await client.query({ query: BIG, context: { costguard: first } });
  assert.equal(first.response.remaining, 0);
  assert.equal(link.lastPrice('Big'), 20);
  const second = {};
  await client.query({ query: BIG, context: { costguard: second } });
  assert.deepEqual(sends.map((s) => s.status), [200, 200], 'never refused');
  assert.equal(second.response.attempt, 1);
  assert.ok(second.response.waited > 0, 'held before the send');
  // 20 points at 10 a second: the view holds it until they are back.
  assert.ok(sends[1].sentAt >= sends[0].at + 1900, `sent ${sends[1].sentAt - sends[0].at} ms after the bucket was emptied`);
});

test('an operation held by the link ends when its signal aborts', async () => {
  const link = createCostLink();
  const { client, sends } = apollo('abort', link);
  await drain('abort');
  // Refused, not retried (Retry-After is longer than its maxWait): the
  // link learns the price and the wait.
  const refused = await client.query({ query: BIG, context: { costguard: { maxWait: 0 } } }).then(() => assert.fail('admitted'), (e) => e);
  assert.equal(budgetOf(refused).code, RATE_LIMITED);
  const n = sends.length;
  const controller = new AbortController();
  const p = client.query({ query: BIG, context: { costguard: { signal: controller.signal } } });
  setTimeout(() => controller.abort(new Error('given up')), 50);
  await assert.rejects(p, /given up/);
  assert.equal(sends.length, n, 'nothing sent');
  assert.equal(link.snapshot().inFlight, 0);
});

test('a subscription refused at subscribe and mid-stream is subscribed again after retryAfterSeconds', async () => {
  const subscribes = [];
  class RecordingWebSocket extends WebSocket {
    send(data, ...rest) {
      if (JSON.parse(String(data)).type === 'subscribe') subscribes.push(Date.now());
      return super.send(data, ...rest);
    }
  }
  // GraphQLWsLink reads the global WebSocket when the server answers a
  // subscribe with an error message, which Node 20 does not define.
  globalThis.WebSocket ??= WebSocket;
  const ws = createClient({ url: server.wsURL, webSocketImpl: RecordingWebSocket, connectionParams: { apiKey: 'subscription' }, retryAttempts: 0 });
  const refusals = [];
  const link = createCostLink({
    onResponse(info) {
      if (info.code) refusals.push({ ...info, at: Date.now() });
    },
  });
  const client = new ApolloClient({ cache: new InMemoryCache(), link: ApolloLink.from([link, new GraphQLWsLink(ws)]) });
  const events = [];
  let wake = () => {};
  await drain('subscription');
  const sub = client.subscribe({ query: S }).subscribe({
    next(r) {
      events.push(r);
      wake();
    },
    error(e) {
      events.push(e);
      wake();
    },
  });
  try {
    // until: publish an issue every 200 ms until n events have arrived.
    const until = async (n) => {
      while (events.length < n) {
        await post('publisher', `mutation { createIssue(repo: "hello-world", title: "e${events.length}") { id } }`);
        await new Promise((resolve) => {
          wake = resolve;
          setTimeout(resolve, 200);
        });
      }
    };
    // The first subscribe is refused; the link subscribes again once.
    await until(1);
    assert.equal(refusals.length, 1);
    assert.equal(refusals[0].code, RATE_LIMITED);
    assert.ok(refusals[0].retryAfter >= 1);
    assert.equal(subscribes.length, 2);
    assert.ok(subscribes[1] >= refusals[0].at + refusals[0].retryAfter * 1000);
    assert.ok(events[0].data.issueCreated.id, JSON.stringify(events[0]));

    // Mid-stream: an event the budget cannot pay ends the subscription
    // with RATE_LIMITED; the link subscribes again once.
    await drain('subscription');
    await until(2);
    assert.equal(refusals.length, 2);
    assert.equal(subscribes.length, 3);
    assert.ok(subscribes[2] >= refusals[1].at + refusals[1].retryAfter * 1000);
    assert.ok(events[1].data.issueCreated.id, JSON.stringify(events[1]));
  } finally {
    sub.unsubscribe();
    await ws.dispose();
  }
});
