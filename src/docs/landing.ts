import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from '../config/schema.js';
import { VERSION } from '../version.js';

const SUMMARY =
  'A self-hosted generation gateway: one OpenAI-shaped API in front of open-weights engines, ' +
  'with durable async jobs and an organisation-wide context store.';

/** Where the console is served, once a build has one. */
export const CONSOLE_PATH = '/console';

/** The landing page's facts, as `GET /` answers them in JSON. */
export const Landing = Type.Object({
  object: Type.Literal('gateway'),
  name: Type.Literal('Kiln'),
  description: Type.String(),
  version: Type.String(),
  openai_base_url: Type.String({ description: 'the base URL to give OpenAI clients' }),
  links: Type.Object({
    api_reference: Type.String(),
    openapi: Type.String(),
    console: Type.Union([Type.String(), Type.Null()], {
      description: 'null while this build serves no console',
    }),
  }),
});
export type Landing = Static<typeof Landing>;

/** A Host header that is a host name or address with an optional port, nothing else. */
const HOST = /^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/;

/**
 * The URL clients reach this gateway at: `public_url` when the operator set one, else the address
 * this request came to (what the browser used; more useful than a bind address such as 0.0.0.0).
 */
export function gatewayUrl(request: FastifyRequest, config: Pick<Config, 'public_url'>): string {
  if (config.public_url) return config.public_url;
  const host = request.host;
  if (host && HOST.test(host)) return `${request.protocol}://${host}`;
  const address = request.socket.localAddress ?? '127.0.0.1';
  const port = request.socket.localPort;
  return `${request.protocol}://${address.includes(':') ? `[${address}]` : address}:${port}`;
}

/** The `q` the Accept header gives `type`, from its most specific matching range (0 when none matches). */
export function acceptQuality(accept: string | undefined, type: string): number {
  if (!accept) return type === 'text/html' ? 1 : 0;
  const [major, minor] = type.split('/');
  let quality = 0;
  let specificity = -1;
  for (const part of accept.split(',')) {
    const [range = '', ...params] = part.trim().toLowerCase().split(';');
    const [rangeMajor, rangeMinor] = range.trim().split('/');
    const matches =
      rangeMajor === major && rangeMinor === minor
        ? 2
        : rangeMajor === major && rangeMinor === '*'
          ? 1
          : rangeMajor === '*' && rangeMinor === '*'
            ? 0
            : -1;
    if (matches <= specificity) continue;
    const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    const value = q === undefined ? 1 : Number(q.slice(2));
    specificity = matches;
    quality = Number.isFinite(value) ? value : 0;
  }
  return quality;
}

const escapeHtml = (text: string) =>
  text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string,
  );

export function landingFacts(base: string, consoleServed: boolean): Landing {
  return {
    object: 'gateway',
    name: 'Kiln',
    description: SUMMARY,
    version: VERSION,
    openai_base_url: `${base}/v1`,
    links: {
      api_reference: `${base}/docs`,
      openapi: `${base}/openapi.json`,
      console: consoleServed ? `${base}${CONSOLE_PATH}` : null,
    },
  };
}

const STYLE = `
:root{color-scheme:light dark;--fg:#1b1b1b;--bg:#fff;--muted:#4a4a4a;--link:#0b5cad;--code:#f2f2f2}
@media (prefers-color-scheme:dark){:root{--fg:#ececec;--bg:#151515;--muted:#c4c4c4;--link:#8cc4ff;--code:#262626}}
body{margin:0;font:16px/1.5 system-ui,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:46rem;margin:0 auto;padding:2rem 1.25rem}
h1{margin:0 0 .25rem}h2{margin-top:2rem;font-size:1.2rem}
a{color:var(--link)}p.lead{color:var(--muted);margin-top:0}
code,pre{font:14px/1.4 ui-monospace,monospace;background:var(--code);border-radius:4px}
code{padding:.1rem .3rem}pre{padding:.75rem;overflow-x:auto}pre code{padding:0}
dt{font-weight:600}dd{margin:0 0 .75rem}
`;

/** The landing page: small, self-contained (no external asset), readable without CSS. */
export function landingHtml(facts: Landing): string {
  const e = escapeHtml;
  const consoleItem = facts.links.console
    ? `<li><a href="${e(facts.links.console)}">Console</a>: jobs, playground, contexts, usage, fleet and keys.</li>`
    : '<li>Console: not in this version of Kiln yet.</li>';
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Kiln ${e(facts.version)}</title>
<style>${STYLE}</style>
</head>
<body>
<main>
<h1>Kiln</h1>
<p class="lead">${e(facts.description)}</p>
<dl>
<dt>Version</dt>
<dd>${e(facts.version)}</dd>
<dt>Base URL for OpenAI clients</dt>
<dd><code>${e(facts.openai_base_url)}</code></dd>
</dl>
<h2>Where to go</h2>
<ul>
<li><a href="${e(facts.links.api_reference)}">API reference</a>: every endpoint, with its request and response schemas.</li>
<li><a href="${e(facts.links.openapi)}">OpenAPI 3.1 document</a>, for client generators and tools.</li>
${consoleItem}
</ul>
<h2>Try it</h2>
<p>Every endpoint but this page, the reference, <code>/healthz</code> and <code>/readyz</code> needs an API key
(an operator makes one with <code>kiln keys create</code>):</p>
<pre><code>export OPENAI_BASE_URL=${e(facts.openai_base_url)}
export OPENAI_API_KEY=kiln_sk_…   # your Kiln key
curl "$OPENAI_BASE_URL/models" -H "Authorization: Bearer $OPENAI_API_KEY"</code></pre>
</main>
</body>
</html>
`;
}

/** `GET /`: HTML for browsers, the same facts as JSON for `Accept: application/json`. No key needed. */
export function landingRoutes(app: FastifyInstance, deps: { config: Pick<Config, 'public_url'> }): void {
  app.get('/', async (request, reply) => {
    const consoleServed = request.server.hasRoute({ method: 'GET', url: CONSOLE_PATH });
    const facts = landingFacts(gatewayUrl(request, deps.config), consoleServed);
    reply.header('vary', 'Accept');
    const accept = request.headers.accept;
    if (acceptQuality(accept, 'application/json') > acceptQuality(accept, 'text/html')) return facts;
    return reply.type('text/html; charset=utf-8').send(landingHtml(facts));
  });
}
