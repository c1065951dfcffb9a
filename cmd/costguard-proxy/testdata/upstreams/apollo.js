// Apollo Server serving schema.graphql through Express: queries and
// mutations over POST and GET (with Apollo's CSRF prevention on, as by
// default), and subscriptions, queries and mutations over graphql-ws
// WebSockets on the same path.
import express from 'express';
import { ApolloServer } from '@apollo/server';
import { expressMiddleware } from '@as-integrations/express5';
import { execute, NoSchemaIntrospectionCustomRule, specifiedRules, subscribe, validate } from 'graphql';
import { WebSocketServer } from 'ws';
import { useServer } from 'graphql-ws/use/ws';
import { createSchema } from './schema.js';
import { Hits, createHTTPServer, graphqlPath, listen, main, recordUpgrades } from './upstream.js';

main(async (config) => {
  const hits = new Hits();
  const schema = createSchema(config);
  const apollo = new ApolloServer({
    schema,
    introspection: config.introspection,
    // stdout carries only the listening line
    logger: { debug() {}, info() {}, warn: console.warn, error: console.error },
    plugins: [{ requestDidStart: async () => ({ executionDidStart: async () => hits.count() }) }],
  });
  await apollo.start();

  const app = express();
  app.use(graphqlPath, express.json({ limit: '10mb' }), expressMiddleware(apollo));
  const server = createHTTPServer(config, hits, app);

  // Apollo Server executes no subscription itself: graphql-ws does, with
  // graphql-js, counted and validated here as Apollo does over HTTP.
  const rules = config.introspection ? specifiedRules : [...specifiedRules, NoSchemaIntrospectionCustomRule];
  const wsServer = new WebSocketServer({ server, path: graphqlPath });
  recordUpgrades(wsServer, hits);
  useServer(
    {
      schema,
      validate: (s, document) => validate(s, document, rules),
      execute: (args) => {
        hits.count();
        return execute(args);
      },
      subscribe: (args) => {
        hits.count();
        return subscribe(args);
      },
    },
    wsServer,
  );

  await listen(server, config.port);
});
