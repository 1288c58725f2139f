import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, configKeys, loadConfig } from '../../src/config/load.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kiln-config-'));
const file = (name: string, text: string) => {
  const at = path.join(dir, name);
  writeFileSync(at, text);
  return at;
};
const problemsOf = (load: () => unknown): string[] => {
  try {
    load();
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  throw new Error('expected a ConfigError');
};

describe('configuration', () => {
  it('has working defaults: SQLite under ./data on port 8080', () => {
    const config = loadConfig({ env: {}, file: file('empty.yaml', '') });
    expect(config.port).toBe(8080);
    expect(config.data_dir).toBe(path.resolve('data'));
    expect(config.store.url).toBe(`sqlite:${path.resolve('data', 'kiln.db')}`);
    expect(config.contexts.max_bytes).toBe(262144);
    expect(Object.isFrozen(config.store)).toBe(true);
  });

  it('reads kiln.yaml, and KILN_* variables win over it', () => {
    const yaml = file(
      'kiln.yaml',
      'port: 9000\nstore:\n  url: postgres://db/kiln\ncontexts:\n  max_bytes: 1000\n',
    );
    const config = loadConfig({
      file: yaml,
      env: {
        KILN_PORT: '9100',
        KILN_SECURITY_ALLOW_HOSTS: '127.0.0.1, 10.0.0.0/8',
        KILN_STORE_SCHEMA: 'kiln',
      },
    });
    expect(config.port).toBe(9100);
    expect(config.store).toMatchObject({ url: 'postgres://db/kiln', schema: 'kiln' });
    expect(config.contexts.max_bytes).toBe(1000);
    expect(config.security.allow_hosts).toEqual(['127.0.0.1', '10.0.0.0/8']);
  });

  it('finds the file through KILN_CONFIG', () => {
    const config = loadConfig({ env: { KILN_CONFIG: file('via-env.yaml', 'host: 0.0.0.0\n') } });
    expect(config.host).toBe('0.0.0.0');
  });

  it('names the key, what is allowed and where a bad value came from', () => {
    expect(problemsOf(() => loadConfig({ env: { KILN_PORT: 'eighty' }, file: file('e.yaml', '') }))).toEqual([
      'port: must be an integer from 0 to 65535; got "eighty" (from KILN_PORT)',
    ]);
    const problems = problemsOf(() =>
      loadConfig({
        env: {},
        file: file('bad.yaml', 'log:\n  level: loud\nstore:\n  url: mysql://x\ncontexts:\n  max_bytes: 0\n'),
      }),
    );
    expect(problems).toHaveLength(3);
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /^log\.level: must be one of fatal, error, warn, info, debug, trace, silent; got "loud"$/,
        ),
        expect.stringMatching(/^store\.url: must be sqlite:<path> or postgres:\/\/…/),
        expect.stringMatching(/^contexts\.max_bytes: must be an integer from 1 to \d+; got 0$/),
      ]),
    );
  });

  it('refuses a duration no timer can wait for (past 24 days), and takes a long retention', () => {
    const problems = problemsOf(() =>
      loadConfig({
        env: { KILN_JOBS_PURGE_INTERVAL: '25d' },
        file: file(
          'long.yaml',
          [
            'shutdown_grace: 30d',
            'webhooks:',
            '  retry_schedule: [5s, 2600000000ms]',
            'engines:',
            '  e:',
            '    serves: unique',
            '    replicas: ["http://127.0.0.1:9"]',
            '    models: { m: x }',
            '    timeout: 40d',
          ].join('\n'),
        ),
      }),
    );
    expect(problems).toEqual(
      expect.arrayContaining([
        `shutdown_grace: must be a duration of at most 24d (Node's timers hold no more); got "30d"`,
        `jobs.purge_interval: must be a duration of at most 24d (Node's timers hold no more); got "25d" (from KILN_JOBS_PURGE_INTERVAL)`,
        expect.stringMatching(
          /^webhooks\.retry_schedule\.1: must be a duration of at most 24d .*"2600000000ms"$/,
        ),
        expect.stringMatching(/^engines\.e\.timeout: must be a duration of at most 24d/),
      ]),
    );
    expect(problems).toHaveLength(4);
    const kept = loadConfig({
      env: {},
      file: file(
        'retain.yaml',
        ['shutdown_grace: 24d', 'jobs:', '  retention: 400d', 'files:', '  url_ttl: 90d'].join('\n'),
      ),
    });
    expect([kept.shutdown_grace, kept.jobs.retention, kept.files.url_ttl]).toEqual(['24d', '400d', '90d']);
  });

  it('refuses unknown keys, so a typo never passes silently', () => {
    const [problem] = problemsOf(() =>
      loadConfig({ env: {}, file: file('typo.yaml', 'store:\n  ulr: sqlite:x.db\n') }),
    );
    expect(problem).toMatch(/^store\.ulr: unknown key \(known keys: .*store\.url/);
  });

  it('refuses a file that is not YAML or not a mapping, and a missing file', () => {
    expect(problemsOf(() => loadConfig({ env: {}, file: file('broken.yaml', 'port: [1,\n') }))[0]).toMatch(
      /not valid YAML/,
    );
    expect(problemsOf(() => loadConfig({ env: {}, file: file('list.yaml', '- a\n- b\n') }))[0]).toMatch(
      /must hold a mapping/,
    );
    expect(problemsOf(() => loadConfig({ env: {}, file: path.join(dir, 'nope.yaml') }))[0]).toMatch(/ENOENT/);
  });

  it('every key has an environment variable named after its path', () => {
    const envs = configKeys().map((k) => k.env);
    expect(envs).toEqual(
      expect.arrayContaining([
        'KILN_PORT',
        'KILN_HOST',
        'KILN_DATA_DIR',
        'KILN_STORE_URL',
        'KILN_PUBLIC_URL',
        'KILN_SECURITY_ALLOW_HOSTS',
      ]),
    );
  });

  it('refuses a fleet where overflow would be the only engine for a model, or a persona has no local model', () => {
    const yaml = file(
      'fleet.yaml',
      [
        'engines:',
        '  local: { replicas: [http://127.0.0.1:9000], models: { llama: llama-3-8b } }',
        '  cloud: { overflow: true, replicas: [https://cloud.example], models: { llama: meta/llama-3-8b, mixtral: mixtral-8x7b } }',
        'personas:',
        '  writer: { model: mixtral }',
      ].join('\n'),
    );
    expect(problemsOf(() => loadConfig({ env: {}, file: yaml }))).toEqual([
      'engines.cloud.models.mixtral: an overflow engine only takes excess load; no local engine serves mixtral',
      'personas.writer.model: no local engine serves mixtral',
    ]);
  });

  it('says what is wrong with security.allow_hosts and dns_servers, both at once', () => {
    const yaml = file(
      'security.yaml',
      ['security:', '  allow_hosts: ["10.0.0.0/99", ok.internal]', '  dns_servers: [abc]'].join('\n'),
    );
    expect(problemsOf(() => loadConfig({ env: {}, file: yaml }))).toEqual([
      "security.allow_hosts[0]: '10.0.0.0/99' is neither a host name nor an IP address or CIDR",
      expect.stringMatching(/^security\.dns_servers: .*abc/),
    ]);
  });

  it('takes a persona of a model whose public name has a slash, as an engine may serve', () => {
    const config = loadConfig({
      env: {},
      file: file(
        'slash.yaml',
        [
          'engines:',
          '  local: { replicas: [http://127.0.0.1:9000], models: { meta-llama/Llama-3.1-8B-Instruct: llama } }',
          'personas:',
          '  helper: { model: meta-llama/Llama-3.1-8B-Instruct }',
        ].join('\n'),
      ),
    });
    expect(config.personas.helper?.model).toBe('meta-llama/Llama-3.1-8B-Instruct');
  });

  it('refuses a purge interval under 100 ms, which would keep a CPU busy', () => {
    expect(
      problemsOf(() => loadConfig({ env: { KILN_JOBS_PURGE_INTERVAL: '0s' }, file: undefined })),
    ).toEqual([
      'jobs.purge_interval: must be a duration of at least 100ms; got "0s" (from KILN_JOBS_PURGE_INTERVAL)',
    ]);
  });

  it('refuses a replica or runner URL that matches the pattern but does not parse', () => {
    const yaml = file(
      'unparsable.yaml',
      [
        'engines:',
        "  local: { replicas: ['http://127.0.0.1:9000', 'http://[oops'], models: { llama: llama-3-8b } }",
        'runners:',
        "  gpu: { url: 'http://gpu:99999', models: [sdxl] }",
      ].join('\n'),
    );
    expect(problemsOf(() => loadConfig({ env: {}, file: yaml }))).toEqual([
      "engines.local.replicas.1: 'http://[oops' is not a URL",
      "runners.gpu.url: 'http://gpu:99999' is not a URL",
    ]);
  });

  it('checks engine entries like every other key', () => {
    const yaml = file(
      'engine.yaml',
      'engines:\n  local: { replicas: [ftp://x], models: {}, serves: everything }\n',
    );
    const problems = problemsOf(() => loadConfig({ env: {}, file: yaml }));
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^engines\.local\.replicas\.0: must be an http:\/\/ or https:\/\/ base URL/),
        expect.stringMatching(/^engines\.local\.serves: must be one of shared-prefix, unique, long-context/),
      ]),
    );
  });
});
