import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ConfigError } from '../config/load.js';
import { KilnError } from '../errors.js';
import type { AppDeps } from './app.js';

/** GET /v1/models: personas and the models the fleet serves (DESIGN.md section 7). */
export function modelRoutes(app: FastifyInstance, deps: AppDeps): void {
  const created = Math.floor(Date.now() / 1000);
  const list = async (orgId: string) => {
    const router = deps.runtime.router();
    const chat = router.models();
    // A persona that names a context this organisation does not have is refused on submission
    // (400 naming `model`): it is not ready for this caller, whatever its engines.
    const needs = new Map(chat.map((m) => [m.id, router.resolve(m.id)?.persona?.contexts ?? []]));
    const missing = new Set(await deps.store.contexts.missing(orgId, [...needs.values()].flat()));
    return [
      ...chat.map((m) => ({
        id: m.id,
        object: 'model',
        created,
        owned_by: m.owned_by,
        kind: m.kind,
        ready: m.ready && !(m.kind === 'persona' && needs.get(m.id)?.some((name) => missing.has(name))),
      })),
      // Image and video models: one per workflow template, ready when a runner serves it.
      ...[...deps.runtime.templates.values()].map((t) => ({
        id: t.model,
        object: 'model',
        created,
        owned_by: 'kiln',
        kind: t.kind,
        ready: deps.runtime.runners.serves(t.model),
      })),
    ];
  };

  app.get('/v1/models', async (request) => ({ object: 'list', data: await list(request.auth.org_id) }));
  // The rest of the path, slashes and all: a served model is often named as on Hugging Face
  // (`meta-llama/Llama-3.1-8B-Instruct`), and OpenAI's Python client puts the id in the path as it is.
  app.get<{ Params: { '*': string } }>('/v1/models/*', async (request) => {
    const id = request.params['*'];
    const model = (await list(request.auth.org_id)).find((m) => m.id === id);
    if (!model) throw new KilnError('model-not-found', `no persona or served model named '${id}'`);
    return model;
  });
}

/** POST /admin/reload: re-read kiln.yaml's engines, personas, routing, limits and runners (admin keys only). */
export function adminRoutes(app: FastifyInstance, deps: AppDeps): void {
  // The role before the body is read or checked: a member key learns nothing of what it would take.
  const adminOnly = async (request: FastifyRequest) => {
    if (request.auth.role !== 'admin')
      throw new KilnError('forbidden', 'reloading the configuration needs an admin key');
  };
  app.post('/admin/reload', { onRequest: adminOnly }, async () => {
    try {
      await deps.runtime.reload();
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      throw new KilnError(
        'validation-failed',
        'the configuration file is invalid; the running one stays in force',
        {
          details: error.problems.map((problem) => ({
            field: problem.split(':')[0] ?? 'config',
            rule: 'config',
            message: problem,
          })),
        },
      );
    }
    // The ids GET /v1/models now lists: personas and chat models, then image and video models.
    return {
      reloaded: true,
      models: [
        ...deps.runtime
          .router()
          .models()
          .map((m) => m.id),
        ...[...deps.runtime.templates.values()].map((t) => t.model),
      ],
    };
  });
}
