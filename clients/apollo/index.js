// An Apollo Client 4 link for a costguard server: it reads every budget
// signal the server sends (RateLimit-Policy and RateLimit, X-RateLimit-*,
// Retry-After, extensions.cost and the refusal body), shows them to the
// application on results and errors, paces operations whose price it knows
// so that they are not refused, waits Retry-After before it retries a
// query, never retries a mutation unless told it is safe, and re-subscribes
// a subscription the server refused, after the wait it named.
import { ApolloLink } from '@apollo/client';
import { Observable } from 'rxjs';

/** How many operation names a view keeps the last price of. */
export const MAX_PRICES = 1000;

/** The refusal code of an operation that does not fit the budget now. */
export const RATE_LIMITED = 'RATE_LIMITED';
/** The refusal code of an operation whose price exceeds the plan: it never fits. */
export const MAX_COST_EXCEEDED = 'MAX_COST_EXCEEDED';
/**
 * The refusal codes that waiting cures: the server names the wait
 * (Retry-After, retryAfterSeconds) and admits the same operation after it.
 */
export const WAIT_CODES = Object.freeze([
  RATE_LIMITED, 'QUOTA_EXCEEDED', 'FIELD_RATE_LIMITED', 'ROUTE_RATE_LIMITED', 'CONCURRENCY_LIMITED', 'OVERLOADED',
  'RATE_LIMITER_UNAVAILABLE',
]);

/**
 * Milliseconds a refusal asks the client to wait before it sends again, or
 * null for an answer that is not such a refusal (admitted, or refused for
 * good: MAX_COST_EXCEEDED, a static cap, FIELD_RATE_LIMITED with no wait).
 * A RATE_LIMITED, or a 429 without a code, that states no wait counts as
 * one second. The bucket's refusal (RATE_LIMITED) of an operation priced
 * above what the plan ever holds is for good too: the bucket could not pay even the refusal's
 * InvalidCost, so the server said "not now" where, once it can, it says
 * MAX_COST_EXCEEDED.
 * @param {BudgetInfo} info
 * @returns {number | null}
 */
export function waitOf(info) {
  if (info.code === MAX_COST_EXCEEDED) return null;
  if (info.code === RATE_LIMITED && info.price != null && info.limit != null && info.limit > 0 && info.price > info.limit) return null;
  const waits = WAIT_CODES.includes(info.code) || info.status === 429 || info.status === 503;
  if (waits && info.retryAfter != null) return info.retryAfter * 1000;
  if (info.code === RATE_LIMITED || (info.code == null && info.status === 429)) return 1000;
  return null;
}

/** The defaults of createCostLink's options (README, "Options"). */
export const defaults = Object.freeze({
  maxWait: 30_000,
  maxRetries: 3,
  retryBudget: Object.freeze({ ratio: 0.2, max: 10 }),
  jitter: 0.2,
  reserve: 0.1,
  minShare: 0.05,
  increase: 0.05,
  smoothing: 2_000,
});

/**
 * Parses a list of structured-field items such as `"free";q=5000;w=3600`
 * (RateLimit-Policy) or `"free";r=4890;t=80` (RateLimit) into
 * [name, {param: number}] pairs. Parameters that are not integers are kept
 * as strings; a malformed item is skipped.
 * @param {string | null | undefined} value
 * @returns {Array<[string, Record<string, number | string>]>}
 */
export function parseItems(value) {
  if (!value) return [];
  const out = [];
  for (const item of value.split(',')) {
    const parts = item.trim().split(';');
    const m = /^"((?:[^"\\]|\\.)*)"$/.exec(parts[0].trim());
    if (!m) continue;
    const params = {};
    for (const p of parts.slice(1)) {
      const eq = p.indexOf('=');
      if (eq < 0) continue;
      const k = p.slice(0, eq).trim();
      const v = p.slice(eq + 1).trim();
      params[k] = /^-?\d+$/.test(v) ? Number(v) : v;
    }
    out.push([m[1].replace(/\\(.)/g, '$1'), params]);
  }
  return out;
}

/**
 * Retry-After in seconds: delta-seconds, or an HTTP date relative to now
 * (milliseconds since the epoch). null when absent or unreadable.
 * @param {string | null | undefined} value
 * @param {number} now
 * @returns {number | null}
 */
export function parseRetryAfter(value, now) {
  if (value == null || value === '') return null;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v);
  const t = Date.parse(v);
  if (Number.isNaN(t)) return null;
  return Math.max(0, Math.ceil((t - now) / 1000));
}

function numberHeader(headers, name) {
  const v = headers.get(name);
  if (v == null || !/^\s*-?\d+\s*$/.test(v)) return null;
  return Number(v);
}

/**
 * What one answer (an HTTP response or a WebSocket message) says about the
 * budget, as the link reports it to the application (result.extensions.costguard,
 * the error's extensions.costguard or costguard property, onResponse).
 * @typedef {object} BudgetInfo
 * @property {number | null} status HTTP status; null over a WebSocket.
 * @property {number | null} retryAfter seconds: the Retry-After header, else the body's retryAfterSeconds.
 * @property {string | null} code the first error's extensions.code (RATE_LIMITED, MAX_COST_EXCEEDED, ...).
 * @property {object | null} cost extensions.cost as the server sent it (requestedQueryCost, actualQueryCost, throttleStatus).
 * @property {number | null} price what the operation costs: extensions.cost.requestedQueryCost, else the refusal's cost.
 * @property {string | null} policy the name of the plan RateLimit quotes.
 * @property {number | null} limit the plan's burst (RateLimit-Policy q, X-RateLimit-Limit).
 * @property {number | null} remaining whole points left after this answer.
 * @property {number | null} reset seconds until the bucket is full (RateLimit t).
 * @property {number | null} resetAt Unix time, seconds, at which it is full (X-RateLimit-Reset).
 * @property {number | null} restoreRate points per second the bucket refills.
 * @property {number} attempt 1 for the first send of the operation, 2 for its first retry, ...
 * @property {number} waited milliseconds the link held the operation before this send.
 */

/**
 * Reads the budget signals of one answer.
 * @param {{status?: number|null, headers?: Headers|null, body?: any}} answer
 * @param {number} now milliseconds since the epoch
 * @returns {BudgetInfo}
 */
export function readBudget({ status = null, headers = null, body = null }, now) {
  const errors = Array.isArray(body?.errors) ? body.errors : [];
  const ext = errors.find((e) => e?.extensions?.code)?.extensions ?? null;
  const cost = body?.extensions?.cost ?? null;
  const ts = cost?.throttleStatus ?? null;
  const info = {
    status,
    retryAfter: null,
    code: ext?.code ?? null,
    cost,
    price: typeof cost?.requestedQueryCost === 'number' ? cost.requestedQueryCost
      : typeof ext?.cost === 'number' ? ext.cost : null,
    policy: null,
    limit: typeof ts?.maximumAvailable === 'number' ? ts.maximumAvailable : null,
    remaining: typeof ts?.currentlyAvailable === 'number' ? Math.floor(ts.currentlyAvailable) : null,
    reset: null,
    resetAt: null,
    restoreRate: typeof ts?.restoreRate === 'number' ? ts.restoreRate : null,
    attempt: 1,
    waited: 0,
  };
  if (headers) {
    const [rl] = parseItems(headers.get('ratelimit'));
    const policies = parseItems(headers.get('ratelimit-policy'));
    if (rl) {
      info.policy = rl[0];
      if (typeof rl[1].r === 'number') info.remaining = rl[1].r;
      if (typeof rl[1].t === 'number') info.reset = rl[1].t;
    }
    const pol = policies.find(([n]) => n === info.policy) ?? policies[0];
    if (pol) {
      info.policy ??= pol[0];
      const { q, w } = pol[1];
      if (typeof q === 'number') info.limit ??= q;
      if (info.restoreRate == null && typeof q === 'number' && typeof w === 'number' && w > 0) info.restoreRate = q / w;
    }
    info.limit ??= numberHeader(headers, 'x-ratelimit-limit');
    info.remaining ??= numberHeader(headers, 'x-ratelimit-remaining');
    info.resetAt = numberHeader(headers, 'x-ratelimit-reset');
    info.retryAfter = parseRetryAfter(headers.get('retry-after'), now);
  }
  if (info.retryAfter == null && typeof ext?.retryAfterSeconds === 'number') info.retryAfter = ext.retryAfterSeconds;
  return info;
}

/**
 * A client's view of the server's bucket, from the answers it gets: the
 * pure part of the link, every method takes `now` (milliseconds).
 *
 * The bucket is shared with every other client of the same key, which this
 * client cannot see. So it counts on a rate of its own (`myRate`, points
 * per second) rather than on the whole refill, and on the same share of
 * the points the bucket holds above a reserve; the rate follows AIMD: it
 * grows by `increase` × the refill each second, and halves when an answer
 * shows the bucket below the reserve (or refuses), once per round trip.
 * Every client of the key sees the same low bucket at about the same time
 * and halves with the others, so their rates converge to equal shares
 * (Chiu and Jain's argument for TCP). Tokens are lost only when the bucket
 * is full; the reserve and the halvings leave it part full, never full
 * while demand lasts. The view also estimates what the others spend (from
 * how `remaining` moves against what this client spent), for the logs and
 * for its first rate.
 */
export class BudgetView {
  /**
   * @param {{reserve?: number, minShare?: number, increase?: number, smoothing?: number}} [opts]
   */
  constructor(opts = {}) {
    this.reserveFraction = opts.reserve ?? defaults.reserve;
    this.minShare = opts.minShare ?? defaults.minShare;
    this.increase = opts.increase ?? defaults.increase;
    this.smoothing = opts.smoothing ?? defaults.smoothing;
    const within = (v, lo, hi) => typeof v === 'number' && v >= lo && v <= hi;
    for (const [k, ok] of [
      ['reserve', within(this.reserveFraction, 0, 1)],
      ['minShare', within(this.minShare, Number.MIN_VALUE, 1)],
      ['increase', within(this.increase, 0, 1)],
      ['smoothing', within(this.smoothing, Number.MIN_VALUE, Infinity)],
    ]) {
      if (!ok) throw new TypeError(`costguard: ${k} is out of range: ${opts[k]}`);
    }
    /** @type {string | null} */ this.policy = null;
    /** @type {number | null} */ this.limit = null;
    /** @type {number | null} */ this.rate = null; // the refill, points per second
    /** @type {number | null} */ this.myRate = null; // what this client counts on, points per second
    /** @type {number | null} */ this.remaining = null; // as last observed
    this.observedAt = 0;
    /** @type {number | null} */ this.resetAt = null; // ms, bucket full
    this.othersRate = 0; // points per second, estimated
    this.estimated = false; // othersRate has had a sample
    this.increasedAt = 0;
    this.decreasedAt = 0; // answers to sends before it do not halve again
    this.inFlight = 0; // points of operations sent and not answered
    this.spentSinceObservation = 0; // points of operations answered as admitted since observedAt
    this.blockedUntil = 0; // ms: no send before (the last Retry-After)
    /** @type {Map<string, number>} */ this.prices = new Map();
    this.maxPrice = 0; // the dearest operation seen that fits the plan
  }

  /** The price last seen for an operation name, or undefined. */
  lastPrice(name) {
    return name == null ? undefined : this.prices.get(name);
  }

  /**
   * The level below which an answer halves the rate: the reserve and room
   * for the dearest operation seen, at most half the burst. Halving before
   * the bucket is empty leaves room for what the other clients send in the
   * meantime.
   */
  lowWater() {
    return Math.min(this.limit / 2, this.reserveFraction * this.limit + this.maxPrice);
  }

  /** This client's share of the refill, in [minShare, 1]; null before any answer. */
  share() {
    return this.rate ? this.myRate / this.rate : null;
  }

  /**
   * The reserve held back for an operation of this price: a fraction of
   * the burst, never so much that a full bucket would not fit it.
   */
  reserveFor(price) {
    return Math.max(0, Math.min(this.reserveFraction * this.limit, this.limit - price));
  }

  /**
   * Points this client may spend now, holding `reserve` back: its share of
   * what the bucket held above the reserve when last seen, plus its rate
   * since, less its operations in flight; null when nothing is known yet.
   */
  available(now, reserve = this.reserveFraction * (this.limit ?? 0)) {
    if (this.remaining == null || this.limit == null || !this.rate) return null;
    const dt = Math.max(0, now - this.observedAt) / 1000;
    const above = Math.min(this.limit, this.remaining) - reserve;
    return above * this.share() + this.myRate * dt - this.inFlight;
  }

  /**
   * Milliseconds to wait before sending an operation of this price (0: send
   * now). Unknown prices and prices that never fit are not held back.
   * @param {number | undefined | null} price
   * @param {number} now
   */
  wait(price, now) {
    const blocked = Math.max(0, this.blockedUntil - now);
    if (price == null || !(price > 0) || this.limit == null || price > this.limit) return blocked;
    const avail = this.available(now, this.reserveFor(price));
    if (avail == null) return blocked;
    const need = price - avail;
    if (need <= 0) return blocked;
    return Math.max(blocked, Math.ceil((need / this.myRate) * 1000));
  }

  /** Records a send of `price` points (unknown: 0). */
  sent(price) {
    this.inFlight += price ?? 0;
  }

  /**
   * Records an answer to an operation sent at `sentAt` for `price` points.
   * @param {BudgetInfo} info
   * @param {number | null | undefined} price what was reserved at the send
   * @param {string | null | undefined} name the operation name
   * @param {number} now
   * @param {number} [sentAt] when the operation was sent (default: now)
   */
  answered(info, price, name, now, sentAt = now) {
    this.inFlight = Math.max(0, this.inFlight - (price ?? 0));
    if (info.price != null && name != null) {
      // The most recently answered names, at most MAX_PRICES: an
      // application that builds operation names at run time does not grow
      // the view without end.
      this.prices.delete(name);
      this.prices.set(name, info.price);
      if (this.prices.size > MAX_PRICES) this.prices.delete(this.prices.keys().next().value);
    }
    if (info.price != null && (this.limit == null || info.price <= this.limit)) this.maxPrice = Math.max(this.maxPrice, info.price);
    const admitted = info.code == null && (info.status == null || info.status < 400);
    const charged = admitted ? (info.cost?.actualQueryCost ?? info.price ?? price ?? 0) : 0;
    if (info.limit != null) this.limit = info.limit;
    if (info.restoreRate != null) this.rate = info.restoreRate;
    if (info.policy != null) this.policy = info.policy;
    if (info.resetAt != null) this.resetAt = info.resetAt * 1000;
    if (this.rate && this.myRate == null) {
      // Until the others are seen, half the refill.
      this.myRate = this.rate / 2;
      this.increasedAt = now;
    }
    if (info.remaining != null && this.rate && this.limit != null) {
      if (this.remaining != null && now > this.observedAt) {
        // What the bucket would hold had only this client spent from it;
        // the shortfall is what the others took.
        const dt = (now - this.observedAt) / 1000;
        const expected = Math.min(this.limit, this.remaining + this.rate * dt) - this.spentSinceObservation - charged;
        const others = Math.min(this.rate, Math.max(0, expected - info.remaining) / dt);
        if (this.estimated) {
          this.othersRate += (1 - Math.exp(-(now - this.observedAt) / this.smoothing)) * (others - this.othersRate);
        } else {
          // The first estimate sets the first rate: what the others leave.
          this.othersRate = others;
          this.myRate = Math.max(this.rate - others, this.rate * this.minShare);
          this.increasedAt = now;
          this.estimated = true;
        }
      }
      this.remaining = info.remaining;
      this.observedAt = now;
      this.spentSinceObservation = 0;
    } else {
      this.spentSinceObservation += charged;
    }
    const wait = waitOf(info);
    if (wait != null) this.blockedUntil = Math.max(this.blockedUntil, now + wait);
    if (this.myRate == null) return;
    const refused = info.code === RATE_LIMITED || (info.code == null && info.status === 429);
    const low = info.remaining != null && this.limit != null && info.remaining < this.lowWater();
    if ((refused || low) && sentAt >= this.decreasedAt) {
      // The clients of the key together count on more than the refill.
      this.myRate = Math.max(this.rate * this.minShare, this.myRate / 2);
      this.decreasedAt = now;
      this.increasedAt = now;
    } else if (admitted && !low) {
      const dt = Math.max(0, now - this.increasedAt) / 1000;
      this.myRate = Math.min(this.rate, this.myRate + this.increase * this.rate * dt);
      this.increasedAt = now;
    }
  }

  /** A copy of the view for logs and UIs, as of now. */
  snapshot(now) {
    const avail = this.available(now);
    return {
      policy: this.policy,
      limit: this.limit,
      // The bucket as it should stand now: refilled, less what the others
      // are estimated to have taken since it was seen.
      remaining: avail == null ? null
        : Math.max(0, Math.floor(Math.min(this.limit, this.remaining + ((this.rate - this.othersRate) * (now - this.observedAt)) / 1000))),
      observedRemaining: this.remaining,
      reset: this.resetAt == null ? null : Math.max(0, Math.ceil((this.resetAt - now) / 1000)),
      restoreRate: this.rate,
      myRate: this.myRate,
      othersRate: this.othersRate,
      inFlight: this.inFlight,
      blockedFor: Math.max(0, this.blockedUntil - now),
      prices: Object.fromEntries(this.prices),
    };
  }
}

/** The error an operation ends with when the link gives up waiting. */
export class CostWaitError extends Error {
  /**
   * @param {string} message
   * @param {number} wait milliseconds still to wait
   */
  constructor(message, wait) {
    super(message);
    this.name = 'CostWaitError';
    this.wait = wait;
  }
}

function abortError(signal) {
  return signal?.reason ?? Object.assign(new Error('the operation was aborted'), { name: 'AbortError' });
}

/**
 * Waits ms milliseconds, or rejects when signal aborts.
 * @param {number} ms
 * @param {AbortSignal} signal
 */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(abortError(signal));
    const onAbort = () => {
      clearTimeout(t);
      reject(abortError(signal));
    };
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, Math.max(0, ms));
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * The budget information of a result or an error the link let through:
 * result.extensions.costguard, a CombinedGraphQLErrors' extensions.costguard,
 * or the costguard property of another error.
 * @param {any} resultOrError
 * @returns {BudgetInfo | undefined}
 */
export function budgetOf(resultOrError) {
  return resultOrError?.extensions?.costguard ?? resultOrError?.costguard ?? undefined;
}

/**
 * Creates the link. Place it before the terminating link (HttpLink, or a
 * split between HttpLink and GraphQLWsLink):
 * `ApolloLink.from([createCostLink(), new HttpLink({ uri })])`.
 *
 * Per operation, `context.costguard` may hold: `retrySafe` (a mutation that
 * may be retried), `price` (what it costs, when the link has not seen it),
 * `maxWait`, `onResponse(info)`; the link also writes the last answer's
 * BudgetInfo to `context.costguard.response` (successful query results lose
 * their extensions in Apollo Client 4, so that is where a query sees them).
 *
 * @param {object} [options]
 * @param {number} [options.maxWait] milliseconds an operation may be held (pacing or Retry-After) before it is sent or given up.
 * @param {number} [options.maxRetries] retries of one operation after a refusal that waiting cures (WAIT_CODES, 429, 503).
 * @param {{ratio: number, max: number}} [options.retryBudget] retries allowed: each admitted operation earns `ratio`, each retry spends 1, at most `max` saved.
 * @param {number} [options.jitter] a fraction of each wait added at random (0.2: up to 20 % longer), never subtracted.
 * @param {number} [options.reserve] fraction of the plan's burst held back; an answer showing less halves the rate.
 * @param {number} [options.minShare] the least share of the refill the view counts on.
 * @param {number} [options.increase] the share of the refill the view's rate grows by each second.
 * @param {number} [options.smoothing] ms: time constant of the estimate of the others' spending.
 * @param {(info: BudgetInfo, operation: any) => void} [options.onResponse] called with every answer.
 * @param {BudgetView} [options.view] a view to share between links (one per API key).
 * @param {() => number} [options.now] the clock, milliseconds since the epoch.
 * @param {() => number} [options.random] random numbers in [0, 1).
 * @returns {ApolloLink & {view: BudgetView, snapshot(): ReturnType<BudgetView['snapshot']>, lastPrice(name: string): number | undefined}}
 */
export function createCostLink(options = {}) {
  const maxWait = options.maxWait ?? defaults.maxWait;
  const maxRetries = options.maxRetries ?? defaults.maxRetries;
  const retryBudget = options.retryBudget ?? defaults.retryBudget;
  const jitter = options.jitter ?? defaults.jitter;
  const now = options.now ?? Date.now;
  const random = options.random ?? Math.random;
  for (const [k, v] of Object.entries({ maxWait, maxRetries, jitter, ratio: retryBudget.ratio, max: retryBudget.max })) {
    if (typeof v !== 'number' || !(v >= 0)) throw new TypeError(`createCostLink: ${k} must be a number ≥ 0, not ${v}`);
  }
  const view = options.view ?? new BudgetView(options);
  let retryTokens = retryBudget.max;

  const withJitter = (ms) => ms + ms * jitter * random();

  function report(info, operation) {
    const cg = operation.getContext().costguard;
    if (cg && typeof cg === 'object' && !Object.isFrozen(cg)) cg.response = info;
    cg?.onResponse?.(info);
    options.onResponse?.(info, operation);
  }

  // decorate returns result with info in extensions.costguard.
  const decorate = (result, info) => ({ ...result, extensions: { ...result.extensions, costguard: info } });

  // hold waits until the view lets an operation of this price go, at most
  // limit ms; past it, an operation held by Retry-After fails, one held by
  // pacing is sent (the server is the judge).
  async function hold(price, limit, signal) {
    const start = now();
    for (;;) {
      const t = now();
      const w = view.wait(price, t);
      if (w <= 0) return t - start;
      const left = start + limit - t;
      if (view.blockedUntil > t && view.blockedUntil - t > left) {
        throw new CostWaitError(`costguard: the server asked to wait ${Math.ceil((view.blockedUntil - t) / 1000)} s, longer than maxWait`, view.blockedUntil - t);
      }
      if (left <= 0) return t - start;
      // A little random extra, so that clients sharing a key do not wake
      // together on the same refill.
      await sleep(Math.min(withJitter(w) + 1, left), signal);
    }
  }

  function httpRequest(operation, forward) {
    return new Observable((observer) => {
      const controller = new AbortController();
      const ctx = operation.getContext();
      const cg = ctx.costguard ?? {};
      const external = cg.signal ?? ctx.fetchOptions?.signal;
      const onAbort = () => controller.abort(external.reason);
      if (external?.aborted) onAbort();
      else external?.addEventListener('abort', onAbort, { once: true });
      const isMutation = operation.operationType === 'mutation';
      const retryable = !isMutation || cg.retrySafe === true;
      const limit = cg.maxWait ?? maxWait;
      let inner = null;
      let closed = false;
      let release = null; // frees the points of an unanswered send

      async function attempt(n) {
        const price = cg.price ?? view.lastPrice(operation.operationName);
        const waited = await hold(price, limit, controller.signal);
        if (closed) return;
        const sentAt = now();
        view.sent(price);
        let done = false;
        let stale = false; // set when this attempt is given up for a retry
        const settle = (info) => {
          if (!done) {
            done = true;
            view.answered(info, price, operation.operationName, now(), sentAt);
          }
        };
        release = () => {
          if (!done) {
            done = true;
            view.inFlight = Math.max(0, view.inFlight - (price ?? 0));
          }
        };
        let sub = null;
        sub = forward(operation).subscribe({
          next(result) {
            if (stale) return;
            const first = !done;
            const response = operation.getContext().response;
            const info = Object.assign(readBudget({ status: response?.status ?? null, headers: response?.headers ?? null, body: result }, now()), { attempt: n, waited });
            if (first) settle(info);
            report(info, operation);
            if (first && mayRetry(n, info)) {
              stale = true;
              sub?.unsubscribe();
              retry(n, info);
              return;
            }
            if (first && info.code == null && (info.status == null || info.status < 400)) {
              retryTokens = Math.min(retryBudget.max, retryTokens + retryBudget.ratio);
            }
            observer.next(decorate(result, info));
          },
          error(err) {
            if (stale) return;
            const response = err?.response ?? operation.getContext().response;
            let body = null;
            try {
              body = err?.bodyText ? JSON.parse(err.bodyText) : null;
            } catch {
              // not JSON: only the status and headers are read
            }
            const info = Object.assign(readBudget({ status: err?.statusCode ?? response?.status ?? null, headers: response?.headers ?? null, body }, now()), { attempt: n, waited });
            settle(info);
            if (err && typeof err === 'object') {
              try {
                err.costguard = info;
              } catch {
                // a frozen error keeps its own properties
              }
            }
            report(info, operation);
            if (mayRetry(n, info)) {
              retry(n, info);
              return;
            }
            observer.error(err);
          },
          complete() {
            if (stale) return;
            if (!done) settle(readBudget({}, now()));
            observer.complete();
          },
        });
        if (stale) sub.unsubscribe();
        else inner = sub;
      }

      // mayRetry takes a retry from the budget when this refusal may be
      // retried: a query or a mutation marked safe, under maxRetries and
      // the retry budget, and a Retry-After the operation may wait.
      function mayRetry(n, info) {
        const wait = waitOf(info);
        if (wait == null || !retryable || n > maxRetries || retryTokens < 1) return false;
        if (wait * (1 + jitter) > limit) return false; // the longest wait, jitter and all
        retryTokens -= 1;
        return true;
      }

      function retry(n, info) {
        // Never before Retry-After: view.blockedUntil holds the deadline
        // (from the header, else the body); jitter only adds.
        view.blockedUntil = Math.max(view.blockedUntil, now() + withJitter(waitOf(info)));
        attempt(n + 1).catch(fail);
      }

      function fail(err) {
        if (!closed) observer.error(err);
      }

      attempt(1).catch(fail);
      return () => {
        closed = true;
        external?.removeEventListener('abort', onAbort);
        controller.abort();
        inner?.unsubscribe();
        release?.();
      };
    });
  }

  function subscriptionRequest(operation, forward) {
    return new Observable((observer) => {
      let inner = null;
      let timer = null;
      let closed = false;
      // again subscribes once more after the wait a refusal names: the
      // server ends a subscription it refuses, at subscribe (an error
      // message) or mid-stream (an event with the code, then complete).
      const again = (info) => {
        // + 1: a timer may fire up to a millisecond before the wall clock
        // says its time has come.
        const ms = withJitter(waitOf(info)) + 1;
        timer = setTimeout(() => {
          timer = null;
          if (!closed) start();
        }, ms);
      };
      const start = () => {
        let refused = null;
        inner = forward(operation).subscribe({
          next(result) {
            const info = readBudget({ body: result }, now());
            view.answered(info, 0, operation.operationName, now());
            report(info, operation);
            if (waitOf(info) != null) {
              refused = info;
              return;
            }
            observer.next(decorate(result, info));
          },
          error(err) {
            if (closed) return;
            // GraphQLWsLink turns an error message into CombinedGraphQLErrors.
            const errors = Array.isArray(err) ? err : err?.errors;
            const info = readBudget({ body: { errors } }, now());
            if (waitOf(info) != null) {
              view.answered(info, 0, operation.operationName, now());
              report(info, operation);
              again(info);
              return;
            }
            observer.error(err);
          },
          complete() {
            if (closed) return;
            if (refused) again(refused);
            else observer.complete();
          },
        });
      };
      start();
      return () => {
        closed = true;
        if (timer) clearTimeout(timer);
        inner?.unsubscribe();
      };
    });
  }

  const link = new ApolloLink((operation, forward) =>
    operation.operationType === 'subscription' ? subscriptionRequest(operation, forward) : httpRequest(operation, forward));
  return Object.assign(link, {
    view,
    snapshot: () => view.snapshot(now()),
    lastPrice: (name) => view.lastPrice(name),
  });
}
