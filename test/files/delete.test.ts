import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ComfySim, startComfySim } from '../../src/sim/comfyui/server.js';
import { statusOf } from '../helpers/http.js';
import { waitUntil } from '../helpers/process.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { caseTitle, storeCases } from '../helpers/stores.js';

/** Callers who want their data gone before retention: DELETE a file, DELETE a terminal job. */
for (const storeCase of storeCases) {
  describe.skipIf(storeCase.skip)(`deleting files and jobs: ${caseTitle(storeCase)}`, () => {
    let kiln: TestServer;
    let comfy: ComfySim;
    /** Renders ltx-2.3 slowly (20 steps of 200 ms), so its jobs are caught while they run. */
    let slowComfy: ComfySim;
    let owner: string;
    let stranger: string;

    beforeAll(async () => {
      comfy = await startComfySim({ models: ['ltx-video', 'sdxl'], stepMs: 1, steps: 2 });
      slowComfy = await startComfySim({ models: ['ltx-2.3'], stepMs: 200, steps: 20 });
      kiln = await startTestServer(storeCase, {
        runners: {
          gpu: { url: comfy.url, models: ['ltx-video', 'sdxl'] },
          slow: { url: slowComfy.url, models: ['ltx-2.3'] },
        },
        'jobs.poll_interval_ms': 100,
      });
      owner = await kiln.key('owner-org');
      stranger = await kiln.key('stranger-org');
    }, 60_000);
    afterAll(async () => {
      await kiln?.close();
      await comfy?.close();
      await slowComfy?.close();
    });

    const onDisk = async (fileId: string) => {
      const row = await kiln.server.store.files.find(fileId);
      return row ? existsSync(path.join(kiln.dataDir, 'files', row.storage_key)) : false;
    };

    it('DELETE /v1/files/{id}: another organisation gets 404 and changes nothing; the owner deletes row, bytes and URLs', async () => {
      const image = await kiln.call('POST', '/v1/images/generations', {
        key: owner,
        body: { prompt: 'a kiln', size: '1024x1024' },
      });
      expect(image.status).toBe(200);
      const url = image.body.data[0].url as string;
      const fileId = /\/v1\/files\/([^/]+)\/content/.exec(url)?.[1] as string;
      expect(await onDisk(fileId)).toBe(true);
      const row = await kiln.server.store.files.find(fileId);

      expect((await kiln.call('DELETE', `/v1/files/${fileId}`, { key: stranger })).status).toBe(404);
      expect(await statusOf(url)).toBe(200);

      const deleted = await kiln.call('DELETE', `/v1/files/${fileId}`, { key: owner });
      expect(deleted.status).toBe(200);
      expect(deleted.body).toEqual({ id: fileId, object: 'file', deleted: true });
      expect(await statusOf(url)).toBe(404);
      expect((await kiln.call('GET', `/v1/files/${fileId}`, { key: owner })).status).toBe(404);
      expect(existsSync(path.join(kiln.dataDir, 'files', row?.storage_key as string))).toBe(false);
      expect((await kiln.call('DELETE', `/v1/files/${fileId}`, { key: owner })).status).toBe(404);
    });

    it('DELETE /v1/jobs/{id}: 404 for another organisation; then its poll is 410, its file gone, its usage kept', async () => {
      const video = await kiln.call('POST', '/v1/videos/generations', {
        key: owner,
        body: { prompt: 'waves', duration_seconds: 1 },
      });
      expect(video.status).toBe(202);
      const job = await waitUntil(
        async () => {
          const poll = await kiln.call('GET', video.body.polling_url, { key: owner });
          return poll.body.status === 'completed' ? poll.body : undefined;
        },
        { timeoutMs: 30_000 },
      );
      const fileId = job.result.file_id as string;
      const url = job.result.url as string;
      expect(await onDisk(fileId)).toBe(true);
      const usageBefore = await kiln.call('GET', '/api/v1/usage', { key: owner });

      expect((await kiln.call('DELETE', `/v1/jobs/${video.body.id}`, { key: stranger })).status).toBe(404);
      expect((await kiln.call('GET', video.body.polling_url, { key: owner })).status).toBe(200);

      const deleted = await kiln.call('DELETE', `/v1/jobs/${video.body.id}`, { key: owner });
      expect(deleted.status).toBe(200);
      expect(deleted.body).toEqual({ id: video.body.id, object: 'job', deleted: true });
      const poll = await kiln.call('GET', video.body.polling_url, { key: owner });
      expect(poll.status).toBe(410);
      expect(poll.body.error.code).toBe('job-expired');
      // Not a message that blames the retention period for a deletion seconds ago.
      expect(poll.body.error.message).toContain('deleted');
      expect(await statusOf(url)).toBe(404);
      expect(await kiln.server.store.files.find(fileId)).toBeUndefined();
      const usageAfter = await kiln.call('GET', '/api/v1/usage', { key: owner });
      expect(usageAfter.body.data).toEqual(usageBefore.body.data);
    });

    it('a queued or running job is not deleted: 409 naming cancel, and once cancelled it can be', async () => {
      const running = await kiln.call('POST', '/v1/videos/generations', {
        key: owner,
        body: { model: 'ltx-2.3', prompt: 'a long one', duration_seconds: 2 },
      });
      expect(running.status, JSON.stringify(running.body)).toBe(202);
      const refused = await kiln.call('DELETE', `/api/v1/jobs/${running.body.id}`, { key: owner });
      expect(refused.status).toBe(409);
      expect(refused.body.error.message).toContain('cancel it first');
      expect(refused.body.job.id).toBe(running.body.id);
      expect(['queued', 'running']).toContain(refused.body.job.status);
      expect((await kiln.call('POST', `/v1/jobs/${running.body.id}/cancel`, { key: owner })).status).toBe(
        200,
      );
      expect((await kiln.call('DELETE', `/v1/jobs/${running.body.id}`, { key: owner })).status).toBe(200);
      expect((await kiln.call('GET', running.body.polling_url, { key: owner })).status).toBe(410);
    });
  });
}
