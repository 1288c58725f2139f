/**
 * The context store's hot paths over real HTTP: fetch by name, save (replace), list — on SQLite and,
 * when reachable, PostgreSQL. Run with `npm run bench`; writes its section of docs/benchmarks.md.
 */
import { storeCases } from '../test/helpers/stores.js';
import { load, machine, writeSection } from './lib.js';
import { spawnGateway } from './server.js';

const TOTAL = Number(process.env.BENCH_REQUESTS ?? 5000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);
const fmt = (ms: number) => ms.toFixed(2);

const rows: string[] = [];
for (const storeCase of storeCases) {
  if (storeCase.skip) {
    rows.push(`| ${storeCase.name} | skipped: ${storeCase.skip} | | | |`);
    continue;
  }
  const fresh = storeCase.fresh();
  const kiln = await spawnGateway({ KILN_STORE_URL: fresh.store.url, KILN_STORE_SCHEMA: fresh.store.schema });
  const headers = { authorization: `Bearer ${kiln.key}`, 'content-type': 'application/json' };
  const content = 'x'.repeat(4096);
  for (let i = 0; i < 100; i++) {
    await fetch(`${kiln.url}/api/v1/contexts`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ name: `doc-${i}`, content }),
    });
  }
  const cases: Array<[string, (i: number) => Promise<void>]> = [
    [
      'GET /api/v1/contexts/{name} (4 KiB)',
      async (i) => {
        const r = await fetch(`${kiln.url}/api/v1/contexts/doc-${i % 100}`, { headers });
        if (r.status !== 200) throw new Error(`status ${r.status}`);
        await r.arrayBuffer();
      },
    ],
    [
      'POST /api/v1/contexts (replace, 4 KiB)',
      async (i) => {
        const r = await fetch(`${kiln.url}/api/v1/contexts`, {
          method: 'POST',
          headers,
          body: JSON.stringify({ name: `doc-${i % 100}`, content }),
        });
        if (r.status !== 200) throw new Error(`status ${r.status}`);
        await r.arrayBuffer();
      },
    ],
    [
      'GET /api/v1/contexts?limit=20',
      async () => {
        const r = await fetch(`${kiln.url}/api/v1/contexts?limit=20`, { headers });
        if (r.status !== 200) throw new Error(`status ${r.status}`);
        await r.arrayBuffer();
      },
    ],
  ];
  for (const [name, request] of cases) {
    await load(200, CONCURRENCY, request); // warm-up
    const result = await load(TOTAL, CONCURRENCY, request);
    rows.push(
      `| ${storeCase.name} | ${name} | ${fmt(result.median)} | ${fmt(result.p99)} | ${Math.round(result.rps)} |`,
    );
    console.log(storeCase.name, name, result);
  }
  await kiln.stop();
  await fresh.cleanup();
}

writeSection(
  'contexts',
  `## Context store over HTTP

${new Date().toISOString().slice(0, 10)} · ${machine()} · ${TOTAL} requests per row, ${CONCURRENCY} in flight, load generator and \`kiln serve\` in separate processes on one machine (loopback), default logging (\`info\`, a line per request).

| store | request | median ms | p99 ms | requests/s |
|---|---|---|---|---|
${rows.join('\n')}`,
);
