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
 * Builds the example server, writes config, starts the server and resolves
 * once it listens.
 * @param {string} config YAML (docs/server.md)
 * @returns {Promise<{url: string, wsURL: string, stop(): Promise<void>, stderr(): string}>}
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
    return {
      url: `${url}/graphql`,
      wsURL: `${url.replace(/^http/, 'ws')}/graphql`,
      stderr: () => err,
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
