import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { issueKey } from '../../src/auth/keys.js';
import { loadConfig } from '../../src/config/load.js';
import { type RunningServer, type ServerOptions, startServer } from '../../src/server.js';
import type { Tier } from '../../src/store/types.js';
import type { StoreCase } from './stores.js';

export interface TestServer {
  url: string;
  adminKey: string;
  dataDir: string;
  server: RunningServer;
  /** A new key, in a new or existing organisation. */
  key(org: string, options?: { tier?: Tier; admin?: boolean }): Promise<string>;
  /** fetch against the server with a bearer key and a JSON body. */
  call(
    method: string,
    route: string,
    options?: { key?: string | null; body?: unknown; headers?: Record<string, string> },
  ): Promise<{ status: number; body: any; headers: Headers }>;
  close(): Promise<void>;
}

/** The real server, listening on a free loopback port, on a fresh store of the given kind. */
export async function startTestServer(
  storeCase: StoreCase,
  overrides: Record<string, unknown> = {},
  options: ServerOptions & { configFile?: string } = {},
): Promise<TestServer> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'kiln-server-'));
  const fresh = storeCase.fresh();
  const config = loadConfig({
    env: {},
    file: options.configFile,
    overrides: {
      data_dir: dataDir,
      port: 0,
      'store.url': fresh.store.url,
      'store.schema': fresh.store.schema,
      ...overrides,
    },
  });
  const server = await startServer(config, pino({ level: process.env.KILN_TEST_LOG ?? 'silent' }), options);
  const adminKey = readFileSync(path.join(dataDir, 'admin.key'), 'utf8').trim();

  const key: TestServer['key'] = async (orgName, keyOptions = {}) => {
    const org = (await server.store.orgs.byName(orgName)) ?? (await server.store.orgs.create(orgName));
    if (!org) throw new Error(`could not create org ${orgName}`);
    const issued = await issueKey(server.store, {
      orgId: org.id,
      tier: keyOptions.tier ?? 'standard',
      role: keyOptions.admin ? 'admin' : 'member',
    });
    return issued.key;
  };

  const call: TestServer['call'] = async (method, route, options = {}) => {
    const headers: Record<string, string> = { ...options.headers };
    const bearer = options.key === undefined ? adminKey : options.key;
    if (bearer !== null) headers.authorization = `Bearer ${bearer}`;
    let body: string | undefined;
    if (options.body !== undefined) {
      body = typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
      headers['content-type'] ??= 'application/json';
    }
    const response = await fetch(`${server.url}${route}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body }),
    });
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {}
    return { status: response.status, body: parsed, headers: response.headers };
  };

  return {
    url: server.url,
    adminKey,
    dataDir,
    server,
    key,
    call,
    async close() {
      await server.close();
      await fresh.cleanup();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * The environment of a `kiln worker` process beside `kiln`: the same store and data directory,
 * loopback allowed, quick polls, its engines read from `configFile`.
 */
export function workerEnv(kiln: TestServer, configFile: string): Record<string, string> {
  const { store } = kiln.server.runtime.config;
  return {
    KILN_CONFIG: configFile,
    KILN_DATA_DIR: kiln.dataDir,
    KILN_STORE_URL: store.url,
    KILN_STORE_SCHEMA: store.schema,
    KILN_SECURITY_ALLOW_HOSTS: '127.0.0.1',
    KILN_JOBS_POLL_INTERVAL_MS: '100',
    KILN_LOG_LEVEL: 'info',
  };
}
