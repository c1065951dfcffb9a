// The link against a naive client, in one run on the example server (built
// and started here; go on PATH): two groups of Apollo clients, each group
// sharing one API key (its own bucket of the same plan), each group
// demanding three times what the plan refills. The naive group retries a
// refusal at once (mutations too); the other goes through createCostLink.
//
//   npm run bench                       60 s
//   npm run bench -- -duration 10       shorter
//
// For each group it prints what was sent, the share refused, the goodput
// (points admitted, as a share of what the budget allowed: refill ×
// duration + burst), the sends made before a Retry-After the same client
// had received ran out, and the retried mutations.
import { parseArgs } from 'node:util';
import { ApolloClient, ApolloLink, HttpLink, InMemoryCache, gql } from '@apollo/client';
import { Observable } from 'rxjs';
import { RATE_LIMITED, createCostLink } from './index.js';
import { startServer } from './testserver.js';

const { values: args } = parseArgs({
  options: {
    duration: { type: 'string', default: '60' },
    clients: { type: 'string', default: '5' },
    rate: { type: 'string', default: '100' },
    burst: { type: 'string', default: '200' },
    demand: { type: 'string', default: '3' },
  },
  allowPositionals: false,
  // -duration as well as --duration
  args: process.argv.slice(2).map((a) => a.replace(/^-(?=\w)/, '--')),
});
const duration = Number(args.duration) * 1000;
const clients = Number(args.clients);
const rate = Number(args.rate); // points per second
const burst = Number(args.burst);
const demand = Number(args.demand);
for (const [k, v] of Object.entries({ duration, clients, rate, burst, demand })) {
  if (!(v > 0)) throw new Error(`bench: -${k} must be a positive number`);
}

const aliases = (name, n) => `query ${name} { ${Array.from({ length: n }, (_, i) => `u${i}: user(login: "octocat") { login }`).join(' ')} }`;
const QUERY = gql(aliases('Read', 3)); // 3 points
const MUTATION = gql`mutation Write { createIssue(repo: "hello-world", title: "bench") { id } }`; // 11 points
const MUTATION_EVERY = 10; // one operation in ten is a mutation
const meanPrice = (3 * (MUTATION_EVERY - 1) + 11) / MUTATION_EVERY;

const config = `plans:
  bench: {burst: ${burst}, rate: ${rate}, per: 1s}
  anon: {burst: 100, rate: 100, per: 1s}
anonymous_plan: anon
api_keys:
  naive-key: {principal: naive, plan: bench}
  link-key: {principal: link, plan: bench}
`;

// naiveRetry retries a refused operation at once, up to three times: what
// a hand-rolled RetryLink does.
const naiveRetry = new ApolloLink((operation, forward) => new Observable((observer) => {
  let sub;
  const go = (n) => {
    sub = forward(operation).subscribe({
      next(r) {
        if (n < 3 && r.errors?.some((e) => e.extensions?.code === RATE_LIMITED)) return go(n + 1);
        observer.next(r);
        observer.complete();
      },
      error: (e) => observer.error(e),
    });
  };
  go(0);
  return () => sub?.unsubscribe();
}));

function group(name, url, key, makeLink) {
  const stats = { name, sent: 0, admitted: 0, refused: 0, points: 0, early: 0, mutationRetries: 0, operations: 0, failed: 0, perClient: [] };
  const runners = [];
  for (let c = 0; c < clients; c++) {
    stats.perClient.push(0);
    let current = null; // the operation in progress: this client sends one at a time
    let notBefore = 0; // this client's last Retry-After runs out at
    const recordingFetch = async (input, init) => {
      const sentAt = Date.now();
      if (sentAt < notBefore) stats.early++;
      const op = current;
      op.sends++;
      if (op.mutation && op.sends > 1) stats.mutationRetries++;
      stats.sent++;
      const res = await fetch(input, init);
      const at = Date.now();
      const body = await res.clone().json().catch(() => null);
      if (res.status === 200 && !body?.errors) {
        stats.admitted++;
        stats.points += body?.extensions?.cost?.actualQueryCost ?? 0;
        stats.perClient[c] += body?.extensions?.cost?.actualQueryCost ?? 0;
      } else if (res.status === 429) {
        stats.refused++;
        const ra = Number(res.headers.get('retry-after'));
        notBefore = Math.max(notBefore, at + ra * 1000);
      }
      return res;
    };
    const link = makeLink();
    const client = new ApolloClient({
      cache: new InMemoryCache(),
      link: ApolloLink.from([link, new HttpLink({ uri: url, headers: { 'x-api-key': key }, fetch: recordingFetch })]),
      defaultOptions: { query: { fetchPolicy: 'no-cache' }, mutate: { fetchPolicy: 'no-cache' } },
    });
    runners.push(async (start) => {
      // Open loop at this client's share of the demand; a client behind
      // its schedule sends its next operation at once.
      const interval = (meanPrice / ((demand * rate) / clients)) * 1000;
      for (let k = c; ; k++) {
        const due = start + (k - c) * interval + (c * interval) / clients;
        const wait = due - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        if (Date.now() >= start + duration) return;
        const mutation = k % MUTATION_EVERY === 0;
        current = { mutation, sends: 0 };
        stats.operations++;
        const signal = AbortSignal.timeout(Math.max(1, start + duration - Date.now()));
        try {
          if (mutation) await client.mutate({ mutation: MUTATION, context: { costguard: { signal } } });
          else await client.query({ query: QUERY, context: { costguard: { signal } } });
        } catch {
          stats.failed++;
        }
      }
    });
  }
  return { stats, run: (start) => Promise.all(runners.map((r) => r(start))) };
}

function report({ name, sent, refused, points, early, mutationRetries, operations, failed, admitted, perClient }, seconds) {
  const allowed = rate * seconds + burst;
  return {
    client: name,
    sent,
    admitted,
    refused,
    'refused %': +((100 * refused) / Math.max(1, sent)).toFixed(2),
    'goodput points': points,
    'goodput %': +((100 * points) / allowed).toFixed(1),
    'early sends': early,
    'mutation retries': mutationRetries,
    'points per client': `${Math.min(...perClient)}–${Math.max(...perClient)}`,
    operations,
    'not done': failed,
  };
}

const server = await startServer(config);
try {
  const naive = group('naive (retries at once)', server.url, 'naive-key', () => naiveRetry);
  const paced = group('createCostLink', server.url, 'link-key', () => createCostLink());
  console.log(`${clients} clients per group, one API key per group; plan: burst ${burst}, ${rate} points/s; demand ${demand}× the refill; ${duration / 1000} s; operations: 3 points, one in ${MUTATION_EVERY} a mutation of 11`);
  const start = Date.now() + 100;
  await Promise.all([naive.run(start), paced.run(start)]);
  const seconds = (Date.now() - start) / 1000;
  const rows = [report(naive.stats, duration / 1000), report(paced.stats, duration / 1000)];
  console.table(rows);
  console.log(`allowed: ${rate} × ${duration / 1000} s + ${burst} = ${rate * (duration / 1000) + burst} points per key (run took ${seconds.toFixed(1)} s)`);
  const link = rows[1];
  const missed = [
    link['refused %'] > 1 && 'refused above 1 %',
    link['goodput %'] < 95 && 'goodput below 95 %',
    link['early sends'] > 0 && 'sends before Retry-After',
    link['mutation retries'] > 0 && 'mutations retried',
  ].filter(Boolean);
  console.log(missed.length ? `createCostLink missed its targets: ${missed.join(', ')}` : 'createCostLink met its targets: refused ≤ 1 %, goodput ≥ 95 %, no early send, no mutation retried');
  if (missed.length) process.exitCode = 1;
} finally {
  await server.stop();
}
