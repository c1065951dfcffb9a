import type { ApolloLink } from '@apollo/client';

export declare const RATE_LIMITED: 'RATE_LIMITED';
export declare const MAX_COST_EXCEEDED: 'MAX_COST_EXCEEDED';
/** The refusal codes that waiting cures. */
export declare const WAIT_CODES: readonly string[];
/** How many operation names a view keeps the last price of (the most recently answered). */
export declare const MAX_PRICES: number;
/** Milliseconds a refusal asks to wait before sending again; null when it is not such a refusal. */
export declare function waitOf(info: BudgetInfo): number | null;

/** What one answer says about the budget. */
export interface BudgetInfo {
  /** HTTP status; null over a WebSocket. */
  status: number | null;
  /** Seconds: the Retry-After header, else the body's retryAfterSeconds. */
  retryAfter: number | null;
  /** The first error's extensions.code (RATE_LIMITED, MAX_COST_EXCEEDED, ...). */
  code: string | null;
  /** extensions.cost as the server sent it. */
  cost: {
    requestedQueryCost?: number;
    actualQueryCost?: number | null;
    throttleStatus?: { maximumAvailable: number; currentlyAvailable: number; restoreRate: number };
    [key: string]: unknown;
  } | null;
  /** What the operation costs: requestedQueryCost, else the refusal's cost. */
  price: number | null;
  /** The plan RateLimit quotes. */
  policy: string | null;
  /** The plan's burst. */
  limit: number | null;
  /** Whole points left after this answer. */
  remaining: number | null;
  /** Seconds until the bucket is full. */
  reset: number | null;
  /** Unix time, seconds, at which the bucket is full. */
  resetAt: number | null;
  /** Points per second the bucket refills. */
  restoreRate: number | null;
  /** 1 for the first send, 2 for the first retry, ... */
  attempt: number;
  /** Milliseconds the link held the operation before this send. */
  waited: number;
}

/** What an operation may put in `context.costguard`. */
export interface CostguardContext {
  /** A mutation that may be retried after RATE_LIMITED. */
  retrySafe?: boolean;
  /** The operation's price, when the link has not seen it yet. */
  price?: number;
  /** Overrides the link's maxWait for this operation. */
  maxWait?: number;
  /** Aborts the operation, held or sent. */
  signal?: AbortSignal;
  /** Called with each answer to this operation. */
  onResponse?: (info: BudgetInfo) => void;
  /** Written by the link: the last answer's budget information. */
  response?: BudgetInfo;
}

export interface BudgetSnapshot {
  policy: string | null;
  limit: number | null;
  /** Whole points the bucket should hold now (refilled, less the others' estimated spending). */
  remaining: number | null;
  /** As last observed. */
  observedRemaining: number | null;
  /** Seconds until the bucket is full. */
  reset: number | null;
  restoreRate: number | null;
  /** Points per second this client counts on (AIMD). */
  myRate: number | null;
  /** Points per second the other clients of the key are estimated to spend. */
  othersRate: number;
  inFlight: number;
  /** Milliseconds before the next send (Retry-After). */
  blockedFor: number;
  /** The last price per operation name. */
  prices: Record<string, number>;
}

export interface ViewOptions {
  reserve?: number;
  minShare?: number;
  increase?: number;
  smoothing?: number;
}

export declare class BudgetView {
  constructor(options?: ViewOptions);
  policy: string | null;
  limit: number | null;
  rate: number | null;
  myRate: number | null;
  remaining: number | null;
  othersRate: number;
  inFlight: number;
  blockedUntil: number;
  lastPrice(name: string | null | undefined): number | undefined;
  maxPrice: number;
  /** The level below which an answer halves myRate. */
  lowWater(): number;
  share(): number | null;
  reserveFor(price: number): number;
  available(now: number, reserve?: number): number | null;
  wait(price: number | null | undefined, now: number): number;
  sent(price: number | null | undefined): void;
  answered(info: BudgetInfo, price: number | null | undefined, name: string | null | undefined, now: number, sentAt?: number): void;
  snapshot(now: number): BudgetSnapshot;
}

export interface CostLinkOptions extends ViewOptions {
  maxWait?: number;
  maxRetries?: number;
  retryBudget?: { ratio: number; max: number };
  jitter?: number;
  onResponse?: (info: BudgetInfo, operation: ApolloLink.Operation) => void;
  view?: BudgetView;
  now?: () => number;
  random?: () => number;
}

export interface CostLink extends ApolloLink {
  view: BudgetView;
  snapshot(): BudgetSnapshot;
  lastPrice(name: string): number | undefined;
}

export declare class CostWaitError extends Error {
  wait: number;
}

export declare const defaults: Readonly<{
  maxWait: number;
  maxRetries: number;
  retryBudget: Readonly<{ ratio: number; max: number }>;
  jitter: number;
  reserve: number;
  minShare: number;
  increase: number;
  smoothing: number;
}>;

export declare function createCostLink(options?: CostLinkOptions): CostLink;
export declare function budgetOf(resultOrError: unknown): BudgetInfo | undefined;
export declare function readBudget(
  answer: { status?: number | null; headers?: Headers | null; body?: unknown },
  now: number,
): BudgetInfo;
export declare function parseItems(value: string | null | undefined): Array<[string, Record<string, number | string>]>;
export declare function parseRetryAfter(value: string | null | undefined, now: number): number | null;

declare module '@apollo/client' {
  interface DefaultContext {
    costguard?: CostguardContext;
  }
}
