'use strict';
// An Apollo gateway in front of costguard-protected subgraphs:
//
//   node example/gateway.js --port 4000 \
//     --subgraph accounts=http://127.0.0.1:4001/query \
//     --subgraph reviews=http://127.0.0.1:4002/query
//
// It prints "gateway listening on URL" once it serves. --plain runs the
// gateway without costguard's data source and plugin, as a gateway without
// them behaves (for comparison; the client's identity is not forwarded).
const { parseArgs } = require('node:util');
const { ApolloServer } = require('@apollo/server');
const { startStandaloneServer } = require('@apollo/server/standalone');
const { ApolloGateway, IntrospectAndCompose, RemoteGraphQLDataSource } = require('@apollo/gateway');
const { clientIdentity, CostguardDataSource, costguardPlugin } = require('..');

async function main() {
  const { values } = parseArgs({
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '4000' },
      subgraph: { type: 'string', multiple: true, default: [] },
      plain: { type: 'boolean', default: false },
    },
  });
  const subgraphs = values.subgraph.map((s) => {
    const i = s.indexOf('=');
    if (i <= 0) throw new Error(`--subgraph ${s}: want name=url`);
    return { name: s.slice(0, i), url: s.slice(i + 1) };
  });
  if (subgraphs.length === 0) throw new Error('no --subgraph name=url given');

  const gateway = new ApolloGateway({
    supergraphSdl: new IntrospectAndCompose({ subgraphs }),
    buildService: ({ name, url }) =>
      values.plain ? new RemoteGraphQLDataSource({ url }) : new CostguardDataSource({ name, url }),
  });
  const server = new ApolloServer({
    gateway,
    plugins: values.plain ? [] : [costguardPlugin()],
    // Stack traces name the gateway's files; NODE_ENV=production drops
    // them too.
    includeStacktraceInErrorResponses: false,
  });
  const { url } = await startStandaloneServer(server, {
    listen: { host: values.host, port: Number(values.port) },
    context: async ({ req }) => (values.plain ? {} : clientIdentity(req)),
  });
  console.log(`gateway listening on ${url}`);
  const stop = async () => {
    await server.stop();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
