// Starts each upstream server as a test would and checks what costguard-proxy's
// tests rely on: the data's sizes, the mutation, subscriptions, /hits, and
// the FAIL_STATUS and INTROSPECTION=off settings.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const dir = fileURLToPath(new URL('..', import.meta.url));
const listeningLine = /^listening (http:\/\/127\.0\.0\.1:(\d+)\/graphql)$/;

// start runs script with env on a free port and resolves once it prints its
// listening line; t.after stops it.
async function start(t, script, env = {}) {
  const child = spawn(process.execPath, [script], {
    cwd: dir,
    env: { ...process.env, PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exited = once(child, 'close'); // after stderr is read to its end
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
  });
  const lines = createInterface({ input: child.stdout });
  const first = await Promise.race([
    once(lines, 'line').then(([line]) => line),
    exited.then(([code]) => {
      throw new Error(`${script} exited (${code}) before listening: ${stderr}`);
    }),
  ]);
  const m = listeningLine.exec(first);
  assert.ok(m, `${script}'s first line ${JSON.stringify(first)} is not the listening line`);
  assert.notEqual(m[2], '0');
  const url = m[1];
  return { url, ws: url.replace(/^http/, 'ws'), base: url.slice(0, -'/graphql'.length) };
}

async function post(url, body, headers = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

async function hits(server) {
  const res = await fetch(`${server.base}/hits`);
  assert.equal(res.status, 200);
  return res.json();
}

// subscribe runs one operation over graphql-ws to its end and returns its
// results; an operation refused by the server rejects with its errors.
async function subscribe(server, payload, headers = {}) {
  const client = createClient({
    url: server.ws,
    retryAttempts: 0,
    webSocketImpl: class extends WebSocket {
      constructor(address, protocols) {
        super(address, protocols, { headers });
      }
    },
  });
  const results = [];
  try {
    for await (const result of client.iterate(payload)) {
      results.push(result);
    }
  } finally {
    await client.dispose();
  }
  return results;
}

const userQuery = `{
  user(login: "alice") {
    id
    repos(first: 5) { name issues(first: 10) { number } contributors { login } }
  }
  labels { name }
  search(term: "alpha") { __typename id }
}`;

for (const script of ['yoga.js', 'apollo.js']) {
  describe(script, { timeout: 60_000 }, () => {
    test('query: sliced lists hold fewer items than first, labels more than assumed', async (t) => {
      const server = await start(t, script);
      const { status, body } = await post(server.url, { query: userQuery });
      assert.equal(status, 200);
      assert.equal(body.errors, undefined);
      const { user, labels, search } = body.data;
      assert.equal(user.id, 'User:alice');
      assert.deepEqual(
        user.repos.map((r) => [r.name, r.issues.length, r.contributors.length]),
        [['alpha', 2, 2], ['beta', 1, 1], ['gamma', 0, 1]],
      );
      assert.equal(labels.length, 25);
      assert.deepEqual(search, [
        { __typename: 'Repo', id: 'Repo:alpha' },
        { __typename: 'Issue', id: 'Issue:alpha#1' },
        { __typename: 'Issue', id: 'Issue:alpha#2' },
      ]);

      const few = await post(server.url, { query: '{ search(term: "a", first: 2) { id } node(id: "Issue:delta#3") { ... on Issue { title author { login } } } }' });
      assert.deepEqual(few.body.data, {
        search: [{ id: 'User:alice' }, { id: 'User:bob' }],
        node: { title: 'delta issue 3', author: { login: 'bob' } },
      });

      const introspection = await post(server.url, { query: '{ __schema { queryType { name } } }' });
      assert.deepEqual(introspection.body.data, { __schema: { queryType: { name: 'Query' } } });
    });

    test('mutation: createIssue opens an issue the repository then lists', async (t) => {
      const server = await start(t, script);
      const created = await post(server.url, {
        query: 'mutation($repo: ID!, $title: String!) { createIssue(repo: $repo, title: $title) { id number title repo { name } } }',
        variables: { repo: 'Repo:gamma', title: 'first one' },
      });
      assert.deepEqual(created.body, {
        data: { createIssue: { id: 'Issue:gamma#1', number: 1, title: 'first one', repo: { name: 'gamma' } } },
      });
      const listed = await post(server.url, { query: '{ node(id: "Repo:gamma") { ... on Repo { issues(first: 5) { title } } } }' });
      assert.deepEqual(listed.body.data.node.issues, [{ title: 'first one' }]);

      const unknown = await post(server.url, { query: 'mutation { createIssue(repo: "Repo:nope", title: "x") { id } }' });
      assert.equal(unknown.body.data.createIssue, null);
      assert.equal(unknown.body.errors[0].extensions.code, 'NOT_FOUND');
    });

    test('subscription over graphql-ws: count events, then complete', async (t) => {
      const server = await start(t, script, { ISSUE_EVENTS: '2', ISSUE_INTERVAL_MS: '5' });
      const asked = await subscribe(server, {
        query: 'subscription { issueAdded(repo: "Repo:alpha", count: 4, intervalMs: 1) { id number title } }',
      });
      assert.deepEqual(
        asked.map((r) => r.data.issueAdded.id),
        ['Issue:alpha#3', 'Issue:alpha#4', 'Issue:alpha#5', 'Issue:alpha#6'],
      );
      const byDefault = await subscribe(server, { query: 'subscription { issueAdded(repo: "Repo:delta") { number } }' });
      assert.deepEqual(byDefault.map((r) => r.data.issueAdded.number), [4, 5]);

      // graphql-js answers a subscribe that fails with one error result.
      const unknown = await subscribe(server, { query: 'subscription { issueAdded(repo: "Repo:nope") { id } }' });
      assert.equal(unknown.length, 1);
      assert.equal(unknown[0].errors[0].extensions.code, 'NOT_FOUND');
    });

    test('/hits counts executed operations over HTTP and WebSocket and keeps the last headers', async (t) => {
      const server = await start(t, script, { ISSUE_EVENTS: '1', ISSUE_INTERVAL_MS: '1' });
      await post(server.url, { query: '{ labels { name } }' });
      assert.equal((await hits(server)).operations, 1);
      const reset = await fetch(`${server.base}/hits/reset`, { method: 'POST' });
      assert.equal(reset.status, 200);
      assert.deepEqual(await hits(server), { operations: 0, lastHeaders: {}, lastUpgradeHeaders: {} });

      // GET, as Apollo's CSRF prevention allows it: with a preflight header.
      const get = await fetch(`${server.url}?query=${encodeURIComponent('{ user(login: "bob") { login } }')}`, {
        headers: { 'apollo-require-preflight': 'true', 'x-test': 'get' },
      });
      assert.deepEqual(await get.json(), { data: { user: { login: 'bob' } } });
      await post(server.url, { query: 'mutation { createIssue(repo: "Repo:beta", title: "t") { id } }' }, { 'x-test': 'post' });
      const invalid = await post(server.url, { query: '{ nope }' }, { 'x-test': 'invalid' });
      assert.ok(invalid.body.errors.length > 0);
      await subscribe(server, { query: '{ user(login: "alice") { login } }' });
      await subscribe(server, { query: 'subscription { issueAdded(repo: "Repo:beta") { id } }' }, { 'x-test': 'ws' });

      const after = await hits(server);
      assert.equal(after.operations, 4, 'GET query, mutation, query and subscription over graphql-ws; not the invalid one');
      assert.equal(after.lastHeaders['x-test'], 'invalid');
      assert.equal(after.lastHeaders['content-type'], 'application/json');
      assert.equal(after.lastUpgradeHeaders['x-test'], 'ws');
      assert.equal(after.lastUpgradeHeaders.upgrade, 'websocket');
    });

    test('FAIL_STATUS answers every GraphQL HTTP request with that status and a GraphQL error', async (t) => {
      const server = await start(t, script, { FAIL_STATUS: '401' });
      const { status, body } = await post(server.url, { query: '{ labels { name } }' }, { authorization: 'Bearer x' });
      assert.equal(status, 401);
      assert.equal(body.data, undefined);
      assert.equal(body.errors[0].extensions.code, 'UNAUTHENTICATED');
      const get = await fetch(`${server.url}?query=${encodeURIComponent('{ labels { name } }')}`);
      assert.equal(get.status, 401);
      const seen = await hits(server);
      assert.equal(seen.operations, 0);
      assert.equal(seen.lastHeaders.authorization, undefined, 'the GET came last');
      assert.equal(seen.lastHeaders.host, server.base.slice('http://'.length));
    });

    test('INTROSPECTION=off refuses introspection over HTTP and WebSocket', async (t) => {
      const server = await start(t, script, { INTROSPECTION: 'off' });
      for (const query of ['{ __schema { types { name } } }', '{ __type(name: "User") { name } }']) {
        const { body } = await post(server.url, { query });
        assert.equal(body.data, undefined, query);
        assert.match(body.errors[0].message, /introspection/i, query);
        await assert.rejects(subscribe(server, { query }), (errors) => /introspection/i.test(errors[0].message), query);
      }
      const plain = await post(server.url, { query: '{ __typename user(login: "bob") { login } }' });
      assert.deepEqual(plain.body, { data: { __typename: 'Query', user: { login: 'bob' } } });
      assert.equal((await hits(server)).operations, 1);
    });
  });
}

test('yoga.js: subscription over Server-Sent Events', { timeout: 60_000 }, async (t) => {
  const server = await start(t, 'yoga.js');
  const res = await fetch(server.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ query: 'subscription { issueAdded(repo: "Repo:delta", count: 3, intervalMs: 1) { number } }' }),
  });
  assert.equal(res.status, 200);
  const events = (await res.text())
    .split('\n')
    .filter((line) => line.startsWith('data: '))
    .map((line) => JSON.parse(line.slice('data: '.length)))
    .filter((data) => data.data);
  assert.deepEqual(events.map((e) => e.data.issueAdded.number), [4, 5, 6]);
  assert.equal((await hits(server)).operations, 1);
});

test('a bad setting stops a server before it listens', { timeout: 60_000 }, async (t) => {
  for (const script of ['yoga.js', 'apollo.js']) {
    await assert.rejects(start(t, script, { FAIL_STATUS: '200' }), /FAIL_STATUS must be an integer from 400 to 599/);
  }
});
