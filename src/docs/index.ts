import type { FastifyInstance } from 'fastify';
import type { Config } from '../config/schema.js';
import { landingRoutes } from './landing.js';
import { registerOpenApi } from './openapi.js';

export { leaveUndocumented } from './openapi.js';

/**
 * What a person or a tool looks at first, none of it behind a key: the landing page at `/`, the
 * OpenAPI document at /openapi.json and the reference page at /docs. Register before the API's
 * routes, so that the document collects them.
 */
export async function registerDocs(app: FastifyInstance, deps: { config: Config }): Promise<void> {
  await registerOpenApi(app);
  landingRoutes(app, deps);
}
