// The pure parts of the link, on a fake clock: reading the signals and the
// view of the bucket. node --test test/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BudgetView, RATE_LIMITED, createCostLink, defaults, parseItems, parseRetryAfter, readBudget } from '../index.js';

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
  answer(v, 0, { remaining: 0, price: 5 });
  assert.equal(v.lastPrice('Q'), 5);
  assert.equal(v.wait(undefined, 0), 0, 'unknown price: not held');
  assert.equal(v.wait(101, 0), 0, 'a price above the plan never fits: not held');
  // 5 points and a reserve of 10 % of 100, at 10 points a second.
  assert.equal(v.wait(5, 0), 1500);
  assert.equal(v.wait(5, 1500), 0);
  v.sent(5);
  assert.equal(v.snapshot(1500).inFlight, 5);
  assert.equal(v.wait(5, 1500), 500, 'points in flight are counted as spent');
});

test('the view counts on its share of the refill: the others\' drain is estimated, AIMD on refusals', () => {
  const v = new BudgetView();
  answer(v, 0, { remaining: 50, price: 5 });
  // A second later: 10 points refilled, 5 spent here, yet 45 left: others
  // took 10 a second.
  answer(v, 1000, { remaining: 45, price: 5 });
  assert.ok(v.othersRate > 1 && v.othersRate <= 10, String(v.othersRate));
  assert.ok(v.ownRate() < 10);
  const before = v.ownRate();
  answer(v, 2000, { remaining: 0, price: 5, code: RATE_LIMITED, retryAfter: 3 });
  assert.equal(v.share, 0.5);
  assert.ok(v.ownRate() < before);
  // No send before Retry-After runs out, whatever the price.
  assert.equal(v.wait(undefined, 2000), 3000);
  assert.equal(v.wait(undefined, 4999), 1);
  assert.equal(v.wait(undefined, 5000), 0);
  // Admitted operations raise the share again, a little each.
  answer(v, 6000, { remaining: 60, price: 1 });
  assert.equal(v.share, 0.5 + defaults.increase);
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
