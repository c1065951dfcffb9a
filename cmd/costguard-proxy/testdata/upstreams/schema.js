// The executable schema both servers serve: schema.graphql with resolvers
// over a small fixed data set, fresh for each server process.
import { readFileSync } from 'node:fs';
import { GraphQLError } from 'graphql';
import { makeExecutableSchema } from '@graphql-tools/schema';

export const typeDefs = readFileSync(new URL('./schema.graphql', import.meta.url), 'utf8');

// The largest count and interval issueAdded accepts: a subscription is a
// test's, and ends within a bounded time.
export const maxEvents = 1000;
export const maxIntervalMs = 60_000;

// createSchema returns the schema with its own data; issueEvents and
// issueIntervalMs are issueAdded's defaults for count and intervalMs.
export function createSchema({ issueEvents, issueIntervalMs }) {
  const data = seed();
  return makeExecutableSchema({
    typeDefs,
    resolvers: {
      Query: {
        user: (_, { login }) => data.byId.get(`User:${login}`) ?? null,
        node: (_, { id }) => data.byId.get(id) ?? null,
        search: (_, { term, first }) => {
          const needle = term.toLowerCase();
          const matches = [...data.byId.values()].filter((node) =>
            [node.login, node.name, node.title].some((text) => text?.toLowerCase().includes(needle)),
          );
          const order = { User: 0, Repo: 1, Issue: 2 };
          matches.sort((a, b) => order[a.kind] - order[b.kind]); // stable: seed order within a kind
          return matches.slice(0, first === null ? matches.length : count(first, 'first'));
        },
        labels: () => data.labels,
      },
      Mutation: {
        createIssue: (_, { repo: repoId, title }) => {
          const repo = repoById(data, repoId);
          if (title.trim() === '') {
            throw new GraphQLError('createIssue: the title is empty', { extensions: { code: 'BAD_USER_INPUT' } });
          }
          return addIssue(data, repo, title);
        },
      },
      Subscription: {
        issueAdded: {
          subscribe: (_, { repo: repoId, count: events, intervalMs }) => {
            const repo = repoById(data, repoId);
            const n = bounded(events ?? issueEvents, 'count', maxEvents);
            const interval = bounded(intervalMs ?? issueIntervalMs, 'intervalMs', maxIntervalMs);
            const opened = repo.issues.length;
            return ticker(n, interval, (i) => ({
              kind: 'Issue',
              id: `Issue:${repo.name}#${opened + i}`,
              number: opened + i,
              title: `${repo.name} event ${i}`,
              repo: repo.name,
              author: repo.owner,
            }));
          },
          resolve: (issue) => issue,
        },
      },
      Node: {
        __resolveType: (node) => node.kind,
      },
      User: {
        repos: (user, { first }) => user.repos.slice(0, count(first, 'first')).map((name) => data.byId.get(`Repo:${name}`)),
      },
      Repo: {
        owner: (repo) => data.byId.get(`User:${repo.owner}`),
        issues: (repo, { first }) => repo.issues.slice(0, count(first, 'first')),
        contributors: (repo) => repo.contributors.map((login) => data.byId.get(`User:${login}`)),
      },
      Issue: {
        repo: (issue) => data.byId.get(`Repo:${issue.repo}`),
        author: (issue) => data.byId.get(`User:${issue.author}`),
      },
    },
  });
}

// seed builds the data set schema.graphql's descriptions promise: alice
// owns alpha, beta and gamma, bob owns delta; 2, 1, 0 and 3 issues; 25
// labels.
function seed() {
  const data = { byId: new Map(), labels: [] };
  const users = [
    { login: 'alice', name: 'Alice Liddell', repos: ['alpha', 'beta', 'gamma'] },
    { login: 'bob', name: 'Bob Dylan', repos: ['delta'] },
  ];
  for (const u of users) {
    data.byId.set(`User:${u.login}`, { kind: 'User', id: `User:${u.login}`, ...u });
  }
  const repos = [
    { name: 'alpha', owner: 'alice', contributors: ['alice', 'bob'], issues: 2 },
    { name: 'beta', owner: 'alice', contributors: ['alice'], issues: 1 },
    { name: 'gamma', owner: 'alice', contributors: ['alice'], issues: 0 },
    { name: 'delta', owner: 'bob', contributors: ['bob', 'alice'], issues: 3 },
  ];
  for (const r of repos) {
    const repo = { kind: 'Repo', id: `Repo:${r.name}`, name: r.name, owner: r.owner, contributors: r.contributors, issues: [] };
    data.byId.set(repo.id, repo);
    for (let i = 1; i <= r.issues; i++) {
      addIssue(data, repo, `${r.name} issue ${i}`);
    }
  }
  const palette = ['#d73a4a', '#0075ca', '#cfd3d7', '#a2eeef', '#7057ff'];
  for (let i = 1; i <= 25; i++) {
    data.labels.push({ name: `label-${String(i).padStart(2, '0')}`, color: palette[(i - 1) % palette.length] });
  }
  return data;
}

function addIssue(data, repo, title) {
  const number = repo.issues.length + 1;
  const issue = { kind: 'Issue', id: `Issue:${repo.name}#${number}`, number, title, repo: repo.name, author: repo.owner };
  repo.issues.push(issue);
  data.byId.set(issue.id, issue);
  return issue;
}

function repoById(data, id) {
  const repo = data.byId.get(id);
  if (repo?.kind !== 'Repo') {
    throw new GraphQLError(`no repository has the ID ${JSON.stringify(id)}`, { extensions: { code: 'NOT_FOUND' } });
  }
  return repo;
}

// count reads a slicing argument: a negative one is refused, as GitHub does.
function count(n, name) {
  if (n < 0) {
    throw new GraphQLError(`${name} must not be negative, got ${n}`, { extensions: { code: 'BAD_USER_INPUT' } });
  }
  return n;
}

function bounded(n, name, max) {
  if (!Number.isInteger(n) || n < 0 || n > max) {
    throw new GraphQLError(`${name} must be between 0 and ${max}, got ${n}`, { extensions: { code: 'BAD_USER_INPUT' } });
  }
  return n;
}

// ticker is an async iterator yielding eventAt(1) … eventAt(n), one every
// intervalMs; return() (the client unsubscribed, or the socket closed)
// stops its timer at once rather than after the wait in progress.
function ticker(n, intervalMs, eventAt) {
  let sent = 0;
  let timer;
  let waiting; // resolves the next() in progress
  const done = () => ({ value: undefined, done: true });
  return {
    [Symbol.asyncIterator]() {
      return this;
    },
    next() {
      if (sent >= n) {
        return Promise.resolve(done());
      }
      return new Promise((resolve) => {
        waiting = resolve;
        timer = setTimeout(() => {
          waiting = undefined;
          sent++;
          resolve({ value: eventAt(sent), done: false });
        }, intervalMs);
      });
    },
    return() {
      clearTimeout(timer);
      sent = n;
      waiting?.(done());
      waiting = undefined;
      return Promise.resolve(done());
    },
  };
}
