import { type InputImage, ModelMissingError, runWorkflow } from '../engines/comfyui/adapter.js';
import { type RunnerPool, RunnersDown } from '../engines/comfyui/runners.js';
import { fill, framesFor, type WorkflowTemplate } from '../engines/comfyui/workflows.js';
import { EngineError } from '../engines/types.js';
import { JobFailure, type JobKind, type RunContext } from '../jobs/kinds.js';
import { imageMeter, videoMeter } from '../limits/meter.js';
import type { OutboundPolicy } from '../net/policy.js';
import { inSpan, SpanKind, traceHeaders } from '../telemetry/index.js';
import { loadImage } from './inputs.js';

/** What the media kinds need of the file store: keep the bytes, describe them, hand out a URL. */
export interface MediaFiles {
  save(input: { orgId: string; jobId: string | null; data: Buffer; contentType: string }): Promise<{
    id: string;
    content_type: string;
    width: number | null;
    height: number | null;
    duration_ms: number | null;
    fps: number | null;
  }>;
  signedUrl(file: { id: string }): string;
}

export interface MediaDeps {
  templates: Map<string, WorkflowTemplate>;
  runners: RunnerPool;
  files: MediaFiles;
  policy: OutboundPolicy;
  maxInputBytes: number;
}

/** What a video job stores: the request as validated, sizes already snapped. */
export interface VideoJobRequest {
  model: string;
  prompt: string;
  negative_prompt: string;
  seed: number;
  duration_seconds: number;
  width: number;
  height: number;
  start_image?: string;
  end_image?: string;
  /** For the 202 answer. */
  size: string;
  size_adjusted: boolean;
}

export interface ImageJobRequest {
  model: string;
  prompt: string;
  negative_prompt: string;
  seed: number;
  n: number;
  width: number;
  height: number;
  response_format: 'url' | 'b64_json';
}

/** Progress is written at most every few percent: a runner reports every sampler step. */
function throttledProgress(job: RunContext<unknown>): (fraction: number) => void {
  let last = 0;
  return (fraction) => {
    if (fraction - last < 0.05 && fraction < 1) return;
    last = fraction;
    void job.progress(Math.min(0.99, fraction)).catch(() => undefined);
  };
}

/** Runs a template's graph on a runner and answers its output files; runner failures become job failures. */
async function run(
  deps: MediaDeps,
  job: RunContext<{ model: string }>,
  signal: AbortSignal,
  graphName: string,
  params: Record<string, string | number>,
  images: InputImage[],
) {
  const template = deps.templates.get(job.request.model);
  const graph = template?.graphs[graphName];
  if (!template || !graph) {
    throw new JobFailure('inference-failed', `no workflow for ${job.request.model} (${graphName})`, {
      model: job.request.model,
    });
  }
  if (deps.runners.runners.length === 0) {
    throw new JobFailure('engine-unavailable', 'no ComfyUI runner is configured (runners in kiln.yaml)');
  }
  const lease = await deps.runners.acquire(job.request.model, signal).catch((error) => {
    throw error instanceof RunnersDown ? new JobFailure('engine-unavailable', error.message) : error;
  });
  try {
    return await inSpan('engine', { kind: SpanKind.CLIENT, signal }, (span) => {
      span?.setAttributes({
        'kiln.runner': lease.runner.name,
        'kiln.model': job.request.model,
        'kiln.workflow': graphName,
      });
      return runWorkflow(lease.runner, {
        fill: (uploaded) => fill(graph, { ...params, ...uploaded }),
        images,
        outputNode: template.output_node,
        // The runner's timeout is the adapter's: it counts once the runner has room for the prompt.
        signal,
        onProgress: throttledProgress(job),
        // Names the engine span as the parent of whatever the runner traces.
        headers: traceHeaders(),
      });
    });
  } catch (error) {
    if (signal.aborted) throw error;
    if (error instanceof ModelMissingError) {
      throw new JobFailure('workflow-model-missing', error.message, {
        model: job.request.model,
        upstreamError: error.upstream,
      });
    }
    if (error instanceof EngineError) {
      throw new JobFailure(
        error.kind === 'unavailable' ? 'engine-unavailable' : 'inference-failed',
        error.message,
      );
    }
    if ((error as Error).name === 'TimeoutError') {
      throw new JobFailure('engine-timeout', `runner ${lease.runner.name} took longer than its timeout`);
    }
    throw error;
  } finally {
    lease.release();
  }
}

function videoKind(
  deps: MediaDeps,
  name: 'video.transition' | 'video.generation',
  object: string,
): JobKind<VideoJobRequest> {
  return {
    name,
    idPrefix: 'vidgen-',
    submissionObject: object,
    pollingBase: '/v1/jobs/',
    queueTtlMs: 60 * 60_000,
    runLimitMs: 60 * 60_000,
    meter: videoMeter(),
    // The effective model and size, and the seed, so a caller can render the same clip again.
    submissionExtras: (r) => ({ model: r.model, size: r.size, size_adjusted: r.size_adjusted, seed: r.seed }),
    async run(job, signal) {
      const r = job.request;
      const template = deps.templates.get(r.model);
      const { length, fps } = template ? framesFor(template, r.duration_seconds) : { length: 1, fps: 1 };
      const images: InputImage[] = [];
      for (const field of ['start_image', 'end_image'] as const) {
        const ref = r[field];
        if (ref)
          images.push({
            param: field,
            ...(await loadImage(ref, field, deps.policy, deps.maxInputBytes, signal)),
          });
      }
      const graph = r.end_image ? 'start_and_end' : r.start_image ? 'start_only' : 'text_only';
      const params = {
        prompt: r.prompt,
        negative_prompt: r.negative_prompt,
        seed: r.seed,
        width: r.width,
        height: r.height,
        length,
        fps,
      };
      const [output] = await run(deps, job, signal, graph, params, images);
      if (!output) throw new JobFailure('inference-failed', 'the runner produced no video');
      const file = await deps.files.save({
        orgId: job.orgId,
        jobId: job.id,
        data: output.data,
        contentType: output.contentType,
      });
      return {
        result: {
          url: deps.files.signedUrl(file),
          file_id: file.id,
          duration_ms: file.duration_ms,
          width: file.width,
          height: file.height,
          fps: file.fps,
          content_type: file.content_type,
          seed: r.seed,
        },
        usage: { outputUnits: file.duration_ms ?? 0 },
      };
    },
  };
}

export function mediaKinds(deps: MediaDeps): JobKind<never, unknown>[] {
  const image: JobKind<ImageJobRequest> = {
    name: 'image.generation',
    idPrefix: 'imggen-',
    submissionObject: 'image.generation.async',
    pollingBase: '/v1/jobs/',
    submissionExtras: (r) => ({ model: r.model, seed: r.seed }),
    queueTtlMs: 30 * 60_000,
    runLimitMs: 30 * 60_000,
    meter: imageMeter(),
    async run(job, signal) {
      const r = job.request;
      const params = {
        prompt: r.prompt,
        negative_prompt: r.negative_prompt,
        seed: r.seed,
        width: r.width,
        height: r.height,
        n: r.n,
      };
      const outputs = await run(deps, job, signal, 'text_to_image', params, []);
      const data = [];
      for (const output of outputs) {
        if (r.response_format === 'b64_json') data.push({ b64_json: output.data.toString('base64') });
        else {
          const file = await deps.files.save({
            orgId: job.orgId,
            jobId: job.id,
            data: output.data,
            contentType: output.contentType,
          });
          data.push({ url: deps.files.signedUrl(file), file_id: file.id });
        }
      }
      return {
        result: { created: Math.floor(Date.now() / 1000), seed: r.seed, data },
        usage: { outputUnits: outputs.length },
      };
    },
  };
  return [
    videoKind(deps, 'video.transition', 'video.transition'),
    videoKind(deps, 'video.generation', 'video.generation'),
    image,
  ] as JobKind<never, unknown>[];
}
