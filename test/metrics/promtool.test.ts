import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import type { LlmSim } from '../../src/sim/llm/server.js';
import { closeAll, engine, simPool } from '../chat/fleet.js';
import { REPO_ROOT, waitUntil } from '../helpers/process.js';
import { probePromtool, promtoolCheckMetrics } from '../helpers/promtool.js';
import { sample } from '../helpers/scrape.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

const promtool = probePromtool();

const TYPES = ['counter', 'gauge', 'histogram', 'summary'] as const;
type MetricType = (typeof TYPES)[number];

/** docs/metrics.md's tables: each row whose first cell is a `kiln_…` name, with its type. */
function documentedMetrics(): Map<string, MetricType> {
  const doc = readFileSync(path.join(REPO_ROOT, 'docs/metrics.md'), 'utf8');
  const metrics = new Map<string, MetricType>();
  for (const line of doc.split('\n')) {
    const cells = /^\|\s*`(kiln_[a-z0-9_]+)`\s*\|\s*(\w+)\s*\|/.exec(line);
    if (!cells) continue;
    const [, name, type] = cells as unknown as [string, string, string];
    expect(metrics.has(name), `${name} is documented once`).toBe(false);
    expect(TYPES, `${name}'s type`).toContain(type);
    metrics.set(name, type as MetricType);
  }
  return metrics;
}

/** The metric families of a scrape: name to type, from its `# TYPE` lines. */
function families(scrape: string): Map<string, string> {
  return new Map(
    [...scrape.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1] as string, m[2] as string] as const),
  );
}

/** Every metric a PromQL expression names: `kiln_…` words, a histogram's series suffix taken off. */
function metricsIn(expr: string, documented: Map<string, MetricType>): string[] {
  return [...expr.matchAll(/\bkiln_[a-z0-9_]+/g)].map(([word]) => {
    const base = word.replace(/_(bucket|sum|count)$/, '');
    return base !== word && documented.get(base) === 'histogram' ? base : word;
  });
}

interface Panel {
  title?: string;
  type: string;
  targets?: Array<{ expr?: string; datasource?: unknown }>;
  panels?: Panel[];
}

describe('docs/metrics.md and docs/grafana-dashboard.json', () => {
  it('the table names each metric once, prefixed kiln_, counters in _total and nothing else in _total', () => {
    const documented = documentedMetrics();
    expect(documented.size).toBeGreaterThan(40);
    for (const [name, type] of documented) {
      expect(name.endsWith('_total'), `${name} (${type})`).toBe(type === 'counter');
    }
    // The names tests, dashboards and alerts already use are still there.
    for (const kept of [
      'kiln_routed_requests_total',
      'kiln_replica_in_flight',
      'kiln_replica_available',
      'kiln_limit_rejections_total',
      'kiln_replica_cached_tokens_reported_total',
    ]) {
      expect(documented.has(kept), kept).toBe(true);
    }
  });

  it('the dashboard is Grafana JSON whose every query uses documented metrics, through a Prometheus datasource variable', () => {
    const documented = documentedMetrics();
    const dashboard = JSON.parse(readFileSync(path.join(REPO_ROOT, 'docs/grafana-dashboard.json'), 'utf8'));
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    expect(dashboard.title).toMatch(/Kiln/);
    const datasource = dashboard.templating.list.find(
      (v: { type: string; query: string }) => v.type === 'datasource' && v.query === 'prometheus',
    );
    expect(datasource, 'a Prometheus datasource variable').toBeDefined();

    const panels: Panel[] = (dashboard.panels as Panel[]).flatMap((p) => [p, ...(p.panels ?? [])]);
    const queried = panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, ...t })));
    expect(queried.length).toBeGreaterThan(15);
    const used = new Set<string>();
    for (const target of queried) {
      expect(target.expr, `${target.panel} has a query`).toMatch(/kiln_/);
      expect(JSON.stringify(target.datasource), `${target.panel} queries the variable`).toContain(
        `\${${datasource.name}}`,
      );
      for (const name of metricsIn(target.expr as string, documented)) {
        expect(documented.has(name), `${target.panel}: ${name} is documented`).toBe(true);
        used.add(name);
      }
    }
    // The issue's list: each area has a panel.
    for (const name of [
      'kiln_jobs_finished_total',
      'kiln_jobs_queued',
      'kiln_jobs_oldest_queued_age_seconds',
      'kiln_job_duration_seconds',
      'kiln_job_wait_seconds',
      'kiln_engine_time_to_first_token_seconds',
      'kiln_engine_inter_token_latency_seconds',
      'kiln_engine_errors_total',
      'kiln_runner_in_flight',
      'kiln_jobs_running_progress_ratio',
      'kiln_webhook_deliveries_total',
      'kiln_store_query_duration_seconds',
      'kiln_http_requests_total',
      'kiln_process_resident_memory_bytes',
    ]) {
      expect(used.has(name), `a panel shows ${name}`).toBe(true);
    }
  });
});

for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`/metrics after a mixed workload: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let sims: LlmSim[] = [];
    let comfy: ComfySim;
    /** Before the workload and after it: the counters are the process's, shared by both stores' runs. */
    let before: string;
    let scrape: string;
    let contentType: string | null;
    /** A webhook receiver on loopback that accepts every delivery. */
    const receiver = createServer((request, response) => {
      request.resume().on('end', () => response.writeHead(204).end());
    });

    beforeAll(async () => {
      sims = await simPool(1);
      comfy = await startComfySim({ models: ['sdxl'], stepMs: 1, steps: 2 });
      await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
      const hookUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks/kiln`;
      kiln = await startTestServer(storeCase, {
        engines: { quick: engine('unique', sims) },
        runners: { gpu: { url: comfy.url, models: ['sdxl'] } },
        'jobs.poll_interval_ms': 50,
        'security.allow_hosts': ['127.0.0.1'],
      });
      before = (await kiln.call('GET', '/metrics')).body as string;

      const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 };
      expect((await kiln.call('POST', '/v1/chat/completions', { body: chat })).status).toBe(200);
      const stream = await kiln.call('POST', '/v1/chat/completions', { body: { ...chat, stream: true } });
      expect(stream.body).toContain('data: [DONE]');
      // The engine refuses one request: an engine error, and a failed job.
      await (sims[0] as LlmSim).setFault({ kind: 'error', status: 400, message: 'no' });
      expect((await kiln.call('POST', '/v1/chat/completions', { body: chat })).status).toBe(400);
      await (sims[0] as LlmSim).setFault(undefined);

      const image = await kiln.call('POST', '/v1/images/generations', {
        body: { prompt: 'a kiln', size: '512x512' },
      });
      expect(image.status, JSON.stringify(image.body)).toBe(200);
      const queued = await kiln.call('POST', '/v1/images/generations', {
        body: { prompt: 'a kiln', size: '512x512', mode: 'async', webhook: { url: hookUrl } },
      });
      expect(queued.status, JSON.stringify(queued.body)).toBe(202);

      expect((await kiln.call('GET', '/v1/nowhere')).status).toBe(404);
      expect((await kiln.call('GET', '/v1/jobs/job_0190000000007000800000000000000a')).status).toBe(404);
      const context = await kiln.call('POST', '/api/v1/contexts', {
        body: { name: 'team/style', content: 'Be brief.' },
      });
      expect(context.status).toBe(201);

      // Scraped once the webhook is delivered: every part of the workload is then in the counters.
      ({ scrape, contentType } = await waitUntil(
        async () => {
          const answer = await kiln.call('GET', '/metrics');
          const text = answer.body as string;
          const delivered = 'kiln_webhook_deliveries_total{outcome="delivered"}';
          return (sample(text, delivered) ?? 0) > (sample(before, delivered) ?? 0)
            ? { scrape: text, contentType: answer.headers.get('content-type') }
            : undefined;
        },
        { timeoutMs: 15_000, intervalMs: 50, describe: () => 'the webhook to be delivered' },
      ));
    }, 60_000);
    afterAll(async () => {
      await kiln?.close();
      await comfy?.close();
      await closeAll(sims);
      await new Promise((resolve) => receiver.close(resolve));
    });

    it.skipIf(!promtool.available)(
      `passes promtool check metrics, with no lint${promtool.available ? '' : ` (skipped: ${promtool.reason})`}`,
      async () => {
        const { code, output } = await promtoolCheckMetrics(scrape);
        expect(output).toBe('');
        expect(code).toBe(0);
      },
    );

    it('is Prometheus text, and has every documented metric with its documented type', () => {
      expect(contentType).toMatch(/^text\/plain; version=0\.0\.4/);
      const documented = documentedMetrics();
      const scraped = families(scrape);
      for (const [name, type] of documented) expect(scraped.get(name), name).toBe(type);
      // And nothing undocumented: a new metric gets its line in docs/metrics.md.
      expect([...scraped.keys()].filter((name) => !documented.has(name))).toEqual([]);
    });

    it('counts what the workload did, labelled by route pattern, kind, replica and outcome', () => {
      const at = (series: string) => sample(scrape, series) ?? Number.NaN;
      /** How much a counter grew during the workload. */
      const grew = (series: string) => at(series) - (sample(before, series) ?? 0);
      expect(grew('kiln_http_requests_total{method="POST",route="/v1/chat/completions",status="200"}')).toBe(
        2,
      );
      expect(grew('kiln_http_requests_total{method="POST",route="/v1/chat/completions",status="400"}')).toBe(
        1,
      );
      expect(grew('kiln_http_requests_total{method="GET",route="unmatched",status="404"}')).toBe(1);
      expect(grew('kiln_http_requests_total{method="GET",route="/v1/jobs/:id",status="404"}')).toBe(1);
      expect(grew('kiln_http_requests_total{method="POST",route="/api/v1/contexts",status="201"}')).toBe(1);
      // Route patterns only: no id or query string ever becomes a label value.
      expect(scrape).not.toMatch(/route="[^"]*(job_|\?)/);

      expect(grew('kiln_jobs_submitted_total{kind="chat",mode="sync"}')).toBe(2);
      expect(grew('kiln_jobs_submitted_total{kind="chat",mode="stream"}')).toBe(1);
      expect(grew('kiln_jobs_finished_total{kind="chat",status="completed"}')).toBe(2);
      expect(grew('kiln_jobs_finished_total{kind="chat",status="failed"}')).toBe(1);
      expect(grew('kiln_jobs_finished_total{kind="image.generation",status="completed"}')).toBe(2);
      expect(grew('kiln_job_wait_seconds_count{kind="image.generation"}')).toBe(2);
      expect(grew('kiln_job_duration_seconds_count{kind="chat",status="completed"}')).toBe(2);
      expect(at('kiln_jobs_queued{kind="image.generation"}')).toBe(0);
      expect(at('kiln_jobs_oldest_queued_age_seconds{kind="chat"}')).toBe(0);

      expect(grew('kiln_engine_time_to_first_token_seconds_count{engine="quick",replica="0"}')).toBe(2);
      expect(grew('kiln_engine_inter_token_latency_seconds_count{engine="quick",replica="0"}')).toBe(2);
      expect(grew('kiln_engine_errors_total{engine="quick",replica="0",kind="rejected"}')).toBe(1);
      expect(grew('kiln_routed_requests_total{class="unique",engine="quick",overflow="false"}')).toBe(3);

      expect(at('kiln_runner_in_flight{runner="gpu"}')).toBe(0);
      expect(at('kiln_runner_max_concurrency{runner="gpu"}')).toBeGreaterThan(0);
      expect(grew('kiln_webhook_deliveries_total{outcome="delivered"}')).toBe(1);
      expect(grew('kiln_store_query_duration_seconds_count{operation="transaction"}')).toBeGreaterThan(5);
      expect(grew('kiln_store_query_duration_seconds_count{operation="get"}')).toBeGreaterThan(5);
      expect(at('kiln_process_resident_memory_bytes')).toBeGreaterThan(0);
    });
  });
}
