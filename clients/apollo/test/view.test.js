// The pure parts of the link, on a fake clock: reading the signals and the
// view of the bucket. node --test test/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BudgetView, MAX_PRICES, RATE_LIMITED, waitOf, createCostLink, defaults, parseItems, parseRetryAfter, readBudget } from '../index.js';

test('structured-field items and Retry-After are read', () => {
  assert.deepEqual(parseItems('"free";q=5000;w=3600, "burst\\"y";r=3;t=x'), [
    ['free', { q: 5000, w: 3600 }],
    ['burst"y', { r: 3, t: 'x' }],
  ]);
  assert.deepEqual(parseItems('free;q=1'), []);
  assert.deepEqual(parseItems(null), []);
  assert.equal(parseRetryAfter('13', 0), 13);
  assert.equal(parseRetryAfter('Thu, 01 Jan 1970 00:00:10 GMT', 1_000), 9);
  assert.equal(parseRetryAfter('soon', 0), null);
  assert.equal(parseRetryAfter(null, 0), null);
});

test('a refusal is read from its headers and body', () => {
  const headers = new Headers({
    'RateLimit-Policy': '"small";q=20;w=2',
    RateLimit: '"small";r=9;t=2',
    'X-RateLimit-Limit': '20',
    'X-RateLimit-Remaining': '9',
    'X-RateLimit-Reset': '1796652329',
    'Retry-After': '1',
  });
  const body = {
    errors: [{ message: 'rate limited', extensions: { code: RATE_LIMITED, cost: 11, retryAfterSeconds: 1 } }],
    extensions: { cost: { requestedQueryCost: 11, actualQueryCost: null, throttleStatus: { maximumAvailable: 20, currentlyAvailable: 9, restoreRate: 10 } } },
  };
  const info = readBudget({ status: 429, headers, body }, 0);
  assert.deepEqual({ ...info, cost: undefined }, {
    status: 429, retryAfter: 1, code: RATE_LIMITED, cost: undefined, price: 11, policy: 'small', limit: 20, remaining: 9,
    reset: 2, resetAt: 1796652329, restoreRate: 10, attempt: 1, waited: 0,
  });
  // Without headers (a WebSocket message): the body's figures.
  const ws = readBudget({ body: { errors: body.errors } }, 0);
  assert.equal(ws.retryAfter, 1);
  assert.equal(ws.price, 11);
  assert.equal(ws.status, null);
  // The refill from the policy when the body has no throttleStatus.
  assert.equal(readBudget({ status: 200, headers, body: { data: {} } }, 0).restoreRate, 10);
});

function answer(view, t, { remaining, price = 1, charged = price, code = null, retryAfter = null, name = 'Q' }) {
  view.sent(price);
  const info = {
    status: code ? 429 : 200, retryAfter, code, cost: { requestedQueryCost: price, actualQueryCost: code ? null : charged },
    price, policy: 'p', limit: 100, remaining, reset: null, resetAt: null, restoreRate: 10, attempt: 1, waited: 0,
  };
  view.answered(info, price, name, t);
}

test('the view holds an operation until its price and the reserve fit', () => {
  const v = new BudgetView();
  assert.equal(v.wait(5, 0), 0, 'nothing known: not held');
  answer(v, 0, { remaining: 15, price: 5 });
  assert.equal(v.lastPrice('Q'), 5);
  assert.equal(v.wait(undefined, 0), 0, 'unknown price: not held');
  assert.equal(v.wait(101, 0), 0, 'a price above the plan never fits: not held');
  // Before the others are seen: half the refill, 5 points a second, and
  // half of the 5 points above the reserve (10 % of 100).
  assert.equal(v.myRate, 5);
  assert.equal(v.wait(5, 0), 500);
  assert.equal(v.wait(5, 500), 0);
  v.sent(5);
  assert.equal(v.snapshot(500).inFlight, 5);
  assert.equal(v.wait(5, 500), 1000, 'points in flight are counted as spent');
  // The reserve never keeps a full bucket from fitting an operation.
  assert.equal(v.reserveFor(5), 10);
  assert.equal(v.reserveFor(95), 5);
  assert.equal(v.reserveFor(100), 0);
});

test('the view counts on a rate of its own: set from the others\' spending, AIMD after', () => {
  const v = new BudgetView();
  answer(v, 0, { remaining: 50, price: 5 });
  // A second later: 10 points refilled, 5 spent here, yet 45 left: the
  // others took 10 points a second, the whole refill; the view counts on
  // minShare of it.
  answer(v, 1000, { remaining: 45, price: 5 });
  assert.equal(v.othersRate, 10);
  assert.equal(v.myRate, 10 * defaults.minShare);
  // Admitted with the bucket above the reserve: the rate grows by
  // increase × the refill each second, up to the refill.
  answer(v, 3000, { remaining: 60, price: 1 });
  assert.equal(v.myRate, 10 * defaults.minShare + 2 * defaults.increase * 10);
  answer(v, 100_000, { remaining: 60, price: 1 });
  assert.equal(v.myRate, 10);
  // Below the low-water mark (the reserve and the dearest operation seen):
  // halved, once for the answers to sends made before.
  assert.equal(v.lowWater(), 10 + 5);
  answer(v, 101_000, { remaining: 5, price: 1 });
  assert.equal(v.myRate, 5);
  v.answered({ ...readBudget({}, 0), status: 200, remaining: 4, limit: 100, restoreRate: 10 }, 0, 'Q', 101_500, 100_900);
  assert.equal(v.myRate, 5, 'sent before the halving: not halved again');
  answer(v, 102_000, { remaining: 4, price: 1 });
  assert.equal(v.myRate, 2.5);
  // A refusal halves it too, and no send goes before its Retry-After,
  // whatever the price.
  answer(v, 103_000, { remaining: 0, price: 5, code: RATE_LIMITED, retryAfter: 3 });
  assert.equal(v.myRate, 1.25);
  assert.equal(v.wait(undefined, 103_000), 3000);
  assert.equal(v.wait(undefined, 105_999), 1);
  assert.equal(v.wait(undefined, 106_000), 0);
  assert.equal(v.snapshot(106_000).blockedFor, 0);
});

test('the view keeps the prices of the most recently answered names, at most MAX_PRICES', () => {
  const v = new BudgetView();
  answer(v, 0, { remaining: 90, price: 7, name: 'Kept' });
  for (let i = 0; i < MAX_PRICES; i++) answer(v, 0, { remaining: 90, price: 2, name: `Q${i}` });
  assert.equal(v.prices.size, MAX_PRICES);
  assert.equal(v.lastPrice('Kept'), undefined, 'the least recently answered name goes first');
  assert.equal(v.lastPrice('Q0'), 2);
  answer(v, 0, { remaining: 90, price: 3, name: 'Q0' }); // answered again: now the newest
  answer(v, 0, { remaining: 90, price: 2, name: 'New' });
  assert.equal(v.lastPrice('Q0'), 3);
  assert.equal(v.lastPrice('Q1'), undefined);
});

test('the bucket\'s refusal of an operation priced above the plan is for good', () => {
  const drained = { status: 429, code: RATE_LIMITED, retryAfter: 5, price: 11, limit: 10 };
  assert.equal(waitOf(drained), null, 'priced above the plan: never fits');
  assert.equal(waitOf({ ...drained, limit: 100 }), 5000, 'within the plan: wait Retry-After');
  assert.equal(waitOf({ ...drained, limit: null }), 5000, 'the plan unknown: wait Retry-After');
  assert.equal(waitOf({ ...drained, code: 'QUOTA_EXCEEDED' }), 5000, 'the quota\'s refusal: wait Retry-After');
});

test('bad options fail at construction', () => {
  assert.throws(() => createCostLink({ maxWait: -1 }), /maxWait/);
  assert.throws(() => createCostLink({ jitter: Number.NaN }), /jitter/);
  assert.throws(() => createCostLink({ retryBudget: { ratio: 0.1 } }), /max/);
  assert.throws(() => createCostLink({ reserve: 1.5 }), /reserve/);
  assert.throws(() => new BudgetView({ minShare: 0 }), /minShare/);
  assert.throws(() => new BudgetView({ smoothing: 0 }), /smoothing/);
});

test('the README\'s table of options states the defaults the code has', async () => {
  const { readFile } = await import('node:fs/promises');
  const readme = await readFile(new URL('../README.md', import.meta.url), 'utf8');
  const rows = new Map([...readme.matchAll(/^\| `(\w+)` \| ([^|]+) \|/gm)].map((m) => [m[1], m[2].trim()]));
  for (const [k, v] of Object.entries(defaults)) {
    const want = typeof v === 'number' ? String(v) : `\`{ratio: ${v.ratio}, max: ${v.max}}\``;
    assert.equal(rows.get(k), want, k);
  }
});
