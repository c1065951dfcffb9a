'use strict';
// Unit tests of the pieces, without a network: node --test test/
// (examples/federation's TestGateway runs them, then the whole gateway).
const test = require('node:test');
const assert = require('node:assert/strict');
const { clientIdentity, CostguardDataSource, costguardPlugin } = require('..');

function req(remoteAddress, headers = {}) {
  return { socket: { remoteAddress }, headers };
}

test('clientIdentity appends the peer to the client\'s X-Forwarded-For', () => {
  assert.equal(clientIdentity(req('192.0.2.7')).costguard.forwardedFor, '192.0.2.7');
  const id = clientIdentity(req('::ffff:192.0.2.7', { 'x-forwarded-for': '203.0.113.9', authorization: 'Bearer k' }));
  assert.equal(id.costguard.forwardedFor, '203.0.113.9, 192.0.2.7');
  assert.deepEqual(id.costguard.credentials, { authorization: 'Bearer k' });
  assert.equal(clientIdentity(req('2001:db8::1')).costguard.forwardedFor, '2001:db8::1');
  assert.throws(() => clientIdentity(req(undefined)), /no remote address/);
});

function send(context, kind = 'incoming operation', preset = {}) {
  const headers = new Headers(preset);
  new CostguardDataSource({ url: 'http://subgraph/query' }).willSendRequest({
    request: { http: { headers } },
    context,
    kind,
  });
  return headers;
}

test('the data source sets the identity headers from the context only', () => {
  const h = send(clientIdentity(req('192.0.2.7', { 'x-api-key': 'k' })), 'incoming operation', {
    authorization: 'Bearer stale',
    'x-forwarded-for': '198.51.100.1',
  });
  assert.equal(h.get('x-forwarded-for'), '192.0.2.7');
  assert.equal(h.get('x-api-key'), 'k');
  assert.equal(h.get('authorization'), null);
});

test('an operation without the client identity is not sent', () => {
  assert.throws(() => send({}), /no client identity/);
  assert.equal(send(undefined, 'loading schema').get('x-forwarded-for'), null);
});

async function refuse(ds, context, status, retryAfter, code) {
  const headers = { 'Content-Type': 'application/json' };
  if (retryAfter !== undefined) headers['Retry-After'] = String(retryAfter);
  const body = code ? { errors: [{ message: code, extensions: { code, retryAfterSeconds: retryAfter } }] } : { errors: [{ message: 'boom' }] };
  const error = await ds.errorFromResponse(new Response(JSON.stringify(body), { status, headers }));
  assert.throws(() => ds.didEncounterError(error, null, null, context, null), (e) => e === error);
  return error;
}

async function respond(context, errors) {
  const hooks = await costguardPlugin().requestDidStart();
  const response = { http: { status: undefined, headers: new Map() }, body: { kind: 'single', singleResult: { errors } } };
  await hooks.willSendResponse({ contextValue: context, response });
  return response;
}

test('the longest Retry-After decides, and its error comes first', async () => {
  const ds = new CostguardDataSource({ name: 'reviews', url: 'http://10.0.0.9:4002/query' });
  const context = clientIdentity(req('192.0.2.7'));
  const a = await refuse(ds, context, 429, 5, 'RATE_LIMITED');
  const b = await refuse(ds, context, 429, 60, 'QUOTA_EXCEEDED');
  assert.deepEqual(a.extensions, { code: 'RATE_LIMITED', retryAfterSeconds: 5 });
  assert.doesNotMatch(JSON.stringify(a), /10\.0\.0\.9/);
  const r = await respond(context, [a.toJSON(), b.toJSON()]);
  assert.equal(r.http.status, 429);
  assert.equal(r.http.headers.get('retry-after'), '60');
  assert.equal(r.body.singleResult.errors[0].extensions.code, 'QUOTA_EXCEEDED');
  // Read once: the next response of that context is untouched.
  assert.equal((await respond(context, [])).http.status, undefined);
});

test('a failure that is not a refusal keeps the gateway\'s answer', async () => {
  const ds = new CostguardDataSource({ name: 'reviews', url: 'http://10.0.0.9:4002/query' });
  const context = clientIdentity(req('192.0.2.7'));
  const e = await refuse(ds, context, 500);
  assert.equal(e.message, 'Subgraph reviews answered 500');
  assert.deepEqual(e.extensions, {});
  assert.equal((await respond(context, [e.toJSON()])).http.status, undefined);
});
