import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setImmediate, setTimeout as sleep } from 'node:timers/promises';
import sharp from 'sharp';
import { NODE_CLASSES, SAMPLER_CLASSES, SLOW_CLASSES } from './catalogue.js';
import type { SimFiles } from './files.js';
import { executionOrder, type OutputPlan, planOutput, promptStrings } from './plan.js';
import { patternPng, renderVideo } from './render.js';
import type { Prompt } from './validate.js';

/**
 * One prompt's execution, message for message as ComfyUI 0.3.64's `PromptExecutor.execute_async`
 * and `prompt_worker` send them: `execution_start`, `execution_cached`, then per node a
 * `progress_state` (the node running), `executing`, sampler `progress` (each step after its own
 * `progress_state`), `executed` for an output node and a `progress_state` (the node finished);
 * then `execution_success`, `execution_error` or `execution_interrupted` — the last three also
 * kept as the history's status messages.
 */

/** The simulator's fault hook: a prompt whose text contains this fails in its sampler. */
export const FAIL_MARKER = '[sim:fail]';

/** Sends a `{type, data}` message to the socket of `sid`, or to every socket when `sid` is undefined. */
export type Send = (event: string, data: Record<string, unknown>, sid?: string) => void;

export interface RunSettings {
  stepMs: number;
  steps: number;
}

/**
 * ComfyUI's progress registry (`comfy_execution/progress.py`): each node's state, sent whole as
 * `progress_state` (nodes not yet started left out) whenever a node starts, moves or finishes.
 */
class ProgressRegistry {
  private readonly nodes = new Map<string, { value: number; max: number; state: 'running' | 'finished' }>();

  constructor(
    private readonly promptId: string,
    private readonly send: Send,
    private readonly clientId: string | undefined,
  ) {}

  start(node: string): void {
    this.nodes.set(node, { value: 0, max: 1, state: 'running' });
    this.publish();
  }

  update(node: string, value: number, max: number): void {
    this.nodes.set(node, { value, max, state: 'running' });
    this.publish();
  }

  finish(node: string): void {
    const entry = this.nodes.get(node) ?? { value: 0, max: 1, state: 'running' };
    this.nodes.set(node, { value: entry.max, max: entry.max, state: 'finished' });
    this.publish();
  }

  private publish(): void {
    const nodes: Record<string, unknown> = {};
    for (const [id, entry] of this.nodes) {
      nodes[id] = {
        ...entry,
        node_id: id,
        prompt_id: this.promptId,
        display_node_id: id,
        parent_node_id: null,
        real_node_id: id,
      };
    }
    // Sent to the prompt's client, or to every socket without one.
    this.send('progress_state', { prompt_id: this.promptId, nodes }, this.clientId);
  }
}

export interface Execution {
  promptId: string;
  prompt: Prompt;
  extraData: Record<string, unknown>;
  outputs: string[];
}

export interface ExecutionResult {
  outcome: 'success' | 'error' | 'interrupted';
  outputs: Record<string, Record<string, unknown>>;
  meta: Record<string, Record<string, unknown>>;
  messages: [string, Record<string, unknown>][];
}

/** A node's failure, with the Python exception type ComfyUI would report for it. */
class NodeFailure extends Error {
  constructor(
    readonly exceptionType: string,
    message: string,
  ) {
    super(message);
  }
}

/** Raised at a node boundary or sampler step once the prompt is interrupted. */
const checkInterrupt = (signal: AbortSignal) => {
  if (signal.aborted) throw signal.reason;
};

export async function executePrompt(
  run: Execution,
  context: { files: SimFiles; send: Send; settings: RunSettings; onNode?: (node: string | null) => void },
  signal: AbortSignal,
): Promise<ExecutionResult> {
  const { prompt, promptId } = run;
  const { send, settings } = context;
  const clientId = typeof run.extraData.client_id === 'string' ? run.extraData.client_id : undefined;
  const messages: ExecutionResult['messages'] = [];
  const addMessage = (event: string, data: Record<string, unknown>, broadcast: boolean) => {
    const stamped = { ...data, timestamp: Date.now() };
    messages.push([event, stamped]);
    if (clientId !== undefined || broadcast) send(event, stamped, clientId);
  };
  const outputs: ExecutionResult['outputs'] = {};
  const meta: ExecutionResult['meta'] = {};
  const executed: string[] = [];
  const progress = new ProgressRegistry(promptId, send, clientId);

  addMessage('execution_start', { prompt_id: promptId }, false);
  addMessage('execution_cached', { nodes: [], prompt_id: promptId }, false);
  const order = executionOrder(prompt, run.outputs);
  const failing = promptStrings(prompt, order).some((text) => text.includes(FAIL_MARKER));

  for (const id of order) {
    const node = prompt[id];
    if (!node) continue;
    try {
      progress.start(id);
      context.onNode?.(id);
      if (clientId !== undefined)
        send('executing', { node: id, display_node: id, prompt_id: promptId }, clientId);
      // ComfyUI checks for an interrupt as the node is about to run (`before_node_execution`).
      checkInterrupt(signal);
      if (SAMPLER_CLASSES.has(node.class_type)) {
        const max = settings.steps;
        for (let value = 1; value <= max; value++) {
          await sleep(settings.stepMs, undefined, { signal });
          if (failing && value === Math.ceil(max / 2)) {
            throw new NodeFailure('RuntimeError', `Simulated failure: the prompt contains ${FAIL_MARKER}`);
          }
          progress.update(id, value, max);
          // ComfyUI's progress hook sends to the prompt's client, or to every socket without one.
          send('progress', { value, max, prompt_id: promptId, node: id }, clientId);
        }
      } else if (run.outputs.includes(id)) {
        const output = await saveOutput(planOutput(prompt, id), context.files, signal);
        outputs[id] = output;
        meta[id] = { node_id: id, display_node: id, parent_node: null, real_node_id: id };
        if (clientId !== undefined) {
          send('executed', { node: id, display_node: id, output, prompt_id: promptId }, clientId);
        }
      } else if (node.class_type === 'LoadImage') {
        await loadImage(context.files, String(node.inputs.image));
      } else if (SLOW_CLASSES.has(node.class_type)) {
        // Such a node does not look at the interrupt flag: it runs to its end regardless.
        await sleep(settings.stepMs * settings.steps);
      } else {
        await setImmediate();
      }
      progress.finish(id);
      executed.push(id);
    } catch (error) {
      const base = { prompt_id: promptId, node_id: id, node_type: node.class_type, executed: [...executed] };
      if (signal.aborted) {
        addMessage('execution_interrupted', base, true);
        return { outcome: 'interrupted', outputs, meta, messages };
      }
      const exception = error as Error;
      addMessage(
        'execution_error',
        {
          ...base,
          // ComfyUI formats the message as "{exception}\n{tips}", the tips empty here.
          exception_message: `${exception.message}\n`,
          exception_type: exception instanceof NodeFailure ? exception.exceptionType : 'RuntimeError',
          traceback: [`  File "kiln-sim/execution.py", in execute\n    ${node.class_type}.execute()\n`],
          current_inputs: currentInputs(prompt, id),
          // The nodes the output cache knows: every node of the prompt.
          current_outputs: Object.keys(prompt),
        },
        false,
      );
      return { outcome: 'error', outputs, meta, messages };
    }
  }
  addMessage('execution_success', { prompt_id: promptId }, false);
  return { outcome: 'success', outputs, meta, messages };
}

/** LoadImage's work: the file must still be there and decode as an image (PIL's errors). */
async function loadImage(files: SimFiles, image: string): Promise<void> {
  const path = files.imagePath(image);
  if (!path) throw new NodeFailure('FileNotFoundError', `[Errno 2] No such file or directory: '${image}'`);
  try {
    await sharp(path).metadata();
  } catch {
    throw new NodeFailure('PIL.UnidentifiedImageError', `cannot identify image file '${path}'`);
  }
}

/** ComfyUI's `current_inputs`: each input as a one-element list, linked values shown as objects. */
function currentInputs(prompt: Prompt, id: string): Record<string, unknown[]> {
  const inputs: Record<string, unknown[]> = {};
  for (const [name, value] of Object.entries(prompt[id]?.inputs ?? {})) {
    if (Array.isArray(value)) {
      const source = prompt[String(value[0])];
      const type = NODE_CLASSES[source?.class_type ?? '']?.outputs[value[1] as number] ?? 'object';
      inputs[name] = [`<simulated ${type} from node ${String(value[0])}>`];
    } else inputs[name] = [value];
  }
  return inputs;
}

const counterText = (n: number) => String(n).padStart(5, '0');

/** Writes the output node's files and returns its UI output, shaped as the real node's. */
async function saveOutput(
  plan: OutputPlan,
  files: SimFiles,
  signal: AbortSignal,
): Promise<Record<string, unknown>> {
  const prefix =
    plan.folderType === 'temp'
      ? `${plan.filenamePrefix}${randomBytes(4).toString('hex').slice(0, 5)}`
      : plan.filenamePrefix;
  const target = await files.savePath(plan.folderType, prefix, plan.width, plan.height);
  const ref = (filename: string) => ({ filename, subfolder: target.subfolder, type: plan.folderType });

  if (plan.container === 'png') {
    const images = [];
    for (let i = 0; i < plan.frames; i++) {
      checkInterrupt(signal);
      const filename = `${target.filename.replaceAll('%batch_num%', String(i))}_${counterText(target.counter + i)}_.png`;
      const key = JSON.stringify([plan.text, plan.seed, i]);
      await writeFile(join(target.folder, filename), await patternPng(plan.width, plan.height, key));
      images.push(ref(filename));
    }
    return { images };
  }

  // Without input images (text to video), stand-in pictures from the prompt give the clip its ends.
  const picture = async (image: string | undefined, which: string) => {
    if (image !== undefined) {
      const path = files.imagePath(image);
      if (!path)
        throw new NodeFailure('FileNotFoundError', `[Errno 2] No such file or directory: '${image}'`);
      return path;
    }
    // Half size is plenty: ffmpeg scales it up, and the softer picture encodes faster.
    const key = JSON.stringify([plan.text, plan.seed, which]);
    const path = join(files.scratch, `${randomBytes(8).toString('hex')}.png`);
    await writeFile(path, await patternPng(Math.ceil(plan.width / 2), Math.ceil(plan.height / 2), key));
    return path;
  };
  const start = await picture(plan.startImage, 'start');
  const end =
    plan.endImage !== undefined || plan.startImage === undefined
      ? await picture(plan.endImage, 'end')
      : undefined;
  const filename = `${target.filename}_${counterText(target.counter)}_.${plan.container}`;
  const fullpath = join(target.folder, filename);
  await renderVideo({
    width: plan.width,
    height: plan.height,
    frames: plan.frames,
    fps: plan.fps,
    start,
    ...(end !== undefined ? { end } : {}),
    container: plan.container,
    ...(plan.crf !== undefined ? { crf: plan.crf } : {}),
    out: fullpath,
    signal,
  });
  if (plan.vhsFormat !== undefined) {
    return {
      gifs: [
        {
          ...ref(filename),
          format: plan.vhsFormat,
          frame_rate: plan.fps,
          workflow: filename.replace(/\.[^.]+$/, '.png'),
          fullpath,
        },
      ],
    };
  }
  return { images: [ref(filename)], animated: [true] };
}
