// docs/clients.md names, in its table of what client libraries do today,
// the versions that test/peers.test.js drives: the ones devDependencies
// pins. node --test test/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';

test('docs/clients.md names the client versions devDependencies pins', async () => {
  const pkg = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8'));
  const doc = await readFile(new URL('../../../docs/clients.md', import.meta.url), 'utf8');
  const v = pkg.devDependencies;
  for (const row of [
    `| Apollo Client ${v['@apollo/client']} |`,
    `| urql (\`@urql/core\` ${v['@urql/core']}, \`@urql/exchange-retry\` ${v['@urql/exchange-retry']}) |`,
    `| graphql-request ${v['graphql-request']} |`,
    `| graphql-ws ${v['graphql-ws']} |`,
    `| graphql-sse ${v['graphql-sse']} |`,
  ]) {
    assert.ok(doc.includes(row), `docs/clients.md has no row beginning ${row}`);
  }
});
