// graphql-yoga serving schema.graphql on node:http: queries and mutations
// over POST and GET, subscriptions over Server-Sent Events, and everything
// over graphql-ws WebSockets on the same path.
import { GraphQLError, NoSchemaIntrospectionCustomRule } from 'graphql';
import { createYoga } from 'graphql-yoga';
import { WebSocketServer } from 'ws';
import { useServer } from 'graphql-ws/use/ws';
import { createSchema } from './schema.js';
import { Hits, createHTTPServer, graphqlPath, listen, main, recordUpgrades } from './upstream.js';

main(async (config) => {
  const hits = new Hits();
  const plugins = [
    {
      // Every operation passes through one of these, whatever its transport.
      onExecute: () => hits.count(),
      onSubscribe: () => hits.count(),
    },
  ];
  if (!config.introspection) {
    plugins.push({ onValidate: ({ addValidationRule }) => addValidationRule(NoSchemaIntrospectionCustomRule) });
  }
  const yoga = createYoga({
    schema: createSchema(config),
    graphqlEndpoint: graphqlPath,
    graphiql: false,
    landingPage: false,
    logging: 'warn', // stdout carries only the listening line
    plugins,
  });

  const server = createHTTPServer(config, hits, yoga);
  const wsServer = new WebSocketServer({ server, path: graphqlPath });
  recordUpgrades(wsServer, hits);
  // graphql-ws runs each operation through yoga's envelop, so its plugins
  // (the counter, the introspection rule) apply as they do over HTTP.
  useServer(
    {
      execute: (args) => args.rootValue.execute(args),
      subscribe: (args) => args.rootValue.subscribe(args),
      onSubscribe: async (ctx, _id, params) => {
        const { schema, execute, subscribe, contextFactory, parse, validate } = yoga.getEnveloped({
          ...ctx,
          req: ctx.extra.request,
          socket: ctx.extra.socket,
          params,
        });
        let document;
        try {
          document = parse(params.query);
        } catch (err) {
          if (err instanceof GraphQLError) {
            return [err];
          }
          throw err;
        }
        const errors = validate(schema, document);
        if (errors.length > 0) {
          return errors;
        }
        return {
          schema,
          operationName: params.operationName,
          document,
          variableValues: params.variables,
          contextValue: await contextFactory(),
          rootValue: { execute, subscribe },
        };
      },
    },
    wsServer,
  );

  await listen(server, config.port);
});
