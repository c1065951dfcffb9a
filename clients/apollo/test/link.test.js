// The link through a real ApolloClient over a terminating link that answers
// as the server's HttpLink would (the response in the context, then the
// body), for what the server cannot be made to do on cue.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ApolloClient, ApolloLink, InMemoryCache, gql } from '@apollo/client';
import { Observable } from 'rxjs';
import { CostWaitError, RATE_LIMITED, budgetOf, createCostLink } from '../index.js';

// answering is a terminating link whose every answer is a 429 with this
// Retry-After (and a full bucket: RATE_LIMITED by another limit); sends
// counts them.
function answering(retryAfter, { status = 429, code = RATE_LIMITED } = {}) {
  const sends = [];
  const link = new ApolloLink((operation) => new Observable((observer) => {
    sends.push(operation.operationName);
    const headers = new Headers({ ratelimit: '"p";r=60;t=0', 'ratelimit-policy': '"p";q=60;w=60' });
    if (retryAfter != null) headers.set('retry-after', String(retryAfter));
    operation.setContext({ response: new Response(null, { status, headers }) });
    observer.next({ errors: [{ message: 'refused', extensions: { code, cost: 1, retryAfterSeconds: retryAfter ?? undefined } }] });
    observer.complete();
  }));
  return { link, sends };
}

const Q = gql`query Q { a }`;

test('a Retry-After longer than maxWait is not waited for: no retry, then CostWaitError until it runs out', async () => {
  const { link, sends } = answering(60);
  const cost = createCostLink({ maxWait: 1000 });
  const client = new ApolloClient({ cache: new InMemoryCache(), link: ApolloLink.from([cost, link]) });
  const err = await client.query({ query: Q }).then(() => assert.fail('admitted'), (e) => e);
  assert.equal(budgetOf(err).retryAfter, 60);
  assert.equal(budgetOf(err).status, 429);
  assert.deepEqual(sends, ['Q']);
  assert.ok(cost.snapshot().blockedFor > 59_000);
  const held = await client.query({ query: Q, fetchPolicy: 'network-only' }).then(() => assert.fail('admitted'), (e) => e);
  assert.ok(held instanceof CostWaitError, String(held));
  assert.ok(held.wait > 59_000);
  assert.deepEqual(sends, ['Q'], 'nothing sent before Retry-After');
});

test('the retry budget bounds retries: each retry spends one, each admitted operation earns ratio', async () => {
  const { link, sends } = answering(0);
  const cost = createCostLink({ maxRetries: 5, retryBudget: { ratio: 0.5, max: 2 } });
  const client = new ApolloClient({ cache: new InMemoryCache(), link: ApolloLink.from([cost, link]) });
  await assert.rejects(client.query({ query: Q }));
  assert.equal(sends.length, 3, 'the first send and the two retries the budget holds');
  await assert.rejects(client.query({ query: Q, fetchPolicy: 'network-only' }));
  assert.equal(sends.length, 4, 'an empty budget: no retry');
});

test('every refusal that waiting cures is retried after its wait; one that names no wait is not', async () => {
  for (const [status, code, retryAfter, sent] of [
    [503, 'OVERLOADED', 0, 2],
    [429, 'CONCURRENCY_LIMITED', 0, 2],
    [429, 'FIELD_RATE_LIMITED', null, 1], // selects the field more times than its limit: never admitted
    [400, 'MAX_DEPTH_EXCEEDED', null, 1],
  ]) {
    const { link, sends } = answering(retryAfter, { status, code });
    const client = new ApolloClient({ cache: new InMemoryCache(), link: ApolloLink.from([createCostLink({ maxRetries: 1 }), link]) });
    const err = await client.query({ query: Q }).then(() => assert.fail('admitted'), (e) => e);
    assert.equal(budgetOf(err).code, code);
    assert.equal(sends.length, sent, code);
  }
});
