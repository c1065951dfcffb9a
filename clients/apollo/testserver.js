// Builds and starts the repository's example server (examples/server) on a
// free loopback port, with a configuration given as YAML text, for the
// tests and the benchmark. Needs go on PATH.
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * A query of n times the example schema's user field: n points, its actual
 * cost as well (a list would be refunded what it did not return).
 * @param {string} name the operation name
 * @param {number} n
 */
export const aliases = (name, n) =>
  `query ${name} { ${Array.from({ length: n }, (_, i) => `u${i}: user(login: "octocat") { login }`).join(' ')} }`;

/**
 * Builds the example server, writes config, starts the server and resolves
 * once it listens.
 * @param {string} config YAML (docs/server.md)
 * @returns {Promise<{url: string, wsURL: string, stop(): Promise<void>, stderr(): string,
 *   post(key: string, query: string, headers?: object): Promise<{status: number, body: any}>,
 *   drain(key: string): Promise<void>}>}
 */
export async function startServer(config) {
  const dir = await mkdtemp(join(tmpdir(), 'costguard-apollo-'));
  try {
    const bin = join(dir, 'server');
    // Built in its own module's directory, so that it builds with or
    // without the workspace (GOWORK=off, as CI runs).
    await promisify(execFile)('go', ['build', '-o', bin, '.'], { cwd: join(root, 'examples', 'server') });
    const cfg = join(dir, 'costguard.yaml');
    await writeFile(cfg, config);
    const child = spawn(bin, ['-addr', '127.0.0.1:0', '-admin-addr', '', '-config', cfg, '-log-level', 'warn'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (b) => {
      err += b;
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const url = await new Promise((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (b) => {
        out += b;
        const m = /costguard example server on (http:\/\/\S+)/.exec(out);
        if (m) resolve(m[1]);
      });
      exited.then((code) => reject(new Error(`example server exited (${code}) before it listened: ${err}`)));
    });
    const endpoint = `${url}/graphql`;
    // post sends one operation without a client library.
    const post = async (key, query, headers = {}) => {
      const res = await fetch(endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': key, ...headers },
        body: JSON.stringify({ query }),
      });
      return { status: res.status, body: await res.json() };
    };
    return {
      url: endpoint,
      wsURL: `${url.replace(/^http/, 'ws')}/graphql`,
      stderr: () => err,
      post,
      /** Spends what is left of key's bucket in one query of that many points. */
      async drain(key) {
        const peek = await post(key, '{ __typename }', { 'graphql-cost': 'validate' });
        const left = peek.body.extensions.cost.throttleStatus.currentlyAvailable;
        if (left === 0) return;
        const { status, body } = await post(key, aliases('Drain', left));
        if (status !== 200 || body.extensions.cost.throttleStatus.currentlyAvailable !== 0) {
          throw new Error(`drain ${key}: ${status} ${JSON.stringify(body)}`);
        }
      },
      async stop() {
        child.kill('SIGTERM');
        await exited;
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}
