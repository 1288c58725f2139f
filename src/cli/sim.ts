import { type Command, InvalidArgumentError } from 'commander';

const integer = (min: number) => (text: string) => {
  const value = Number(text);
  if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(value) || value < min) {
    throw new InvalidArgumentError(`expected a whole number ≥ ${min}`);
  }
  return value;
};

const milliseconds = (text: string) => {
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value) || value < 0) {
    throw new InvalidArgumentError('expected a number of milliseconds ≥ 0');
  }
  return value;
};

interface SimLlmFlags {
  host: string;
  port: number;
  replicas: number;
  model?: string;
  maxSequences?: number;
  kvBlocks?: number;
  blockTokens?: number;
  prefillMsPerToken?: number;
  decodeMsPerToken?: number;
  maxTokensDefault?: number;
  contextWindow?: number;
  flavor?: 'vllm' | 'llama.cpp';
  nonStreamDisconnect?: 'ignore' | 'cancel';
  loadMs?: number;
  ignoreStreamOptions?: boolean;
  vision?: boolean;
}

/** One of the given words, for options that name a choice. */
const oneOf =
  <T extends string>(...choices: T[]) =>
  (text: string): T => {
    if (!(choices as string[]).includes(text))
      throw new InvalidArgumentError(`expected ${choices.join(' or ')}`);
    return text as T;
  };

interface SimComfyuiFlags {
  host: string;
  port: number;
  models?: string[];
  stepMs?: number;
  steps?: number;
  jobsApi?: boolean;
}

/** Model names separated by commas; `none` (or nothing) for a runner with an empty models directory. */
const modelList = (text: string) => {
  if (text.trim() === 'none') return [];
  return text
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');
};

export function simCommands(program: Command): void {
  const sim = program
    .command('sim')
    .description('engine simulators: rehearse a fleet, run tests and benchmarks without GPUs');

  sim
    .command('llm')
    .description(
      'OpenAI-compatible LLM servers that behave like vLLM or llama.cpp (batching, prefix cache, timing, ' +
        'faults); prints one URL per replica on stdout and runs until SIGINT or SIGTERM',
    )
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option(
      '--port <port>',
      'port of the first replica; the others take the next ones (0 = any)',
      integer(0),
      8000,
    )
    .option('--replicas <n>', 'how many servers to start', integer(1), 1)
    .option('--model <id>', 'served model id (default sim-llama-3-8b)')
    .option(
      '--max-sequences <n>',
      'requests running at once (prefilled one at a time, decoded side by side); more wait in a queue (default 8)',
      integer(1),
    )
    .option('--kv-blocks <n>', 'prefix-cache capacity in KV blocks, LRU (default 1024)', integer(0))
    .option('--block-tokens <n>', 'tokens per KV block (default 16)', integer(1))
    .option(
      '--prefill-ms-per-token <ms>',
      'prefill time per uncached prompt token; one prefill at a time per replica (default 0.05)',
      milliseconds,
    )
    .option('--decode-ms-per-token <ms>', 'decode time per output token (default 5)', milliseconds)
    .option(
      '--max-tokens-default <n>',
      'output tokens when a request sets no max_tokens (default 64)',
      integer(1),
    )
    .option(
      '--context-window <n>',
      'context length in tokens (llama.cpp: per slot) (default 32768)',
      integer(2),
    )
    .option(
      '--flavor <engine>',
      'the engine imitated on the wire: vllm or llama.cpp (shapes, errors, routes, metrics) (default vllm)',
      oneOf('vllm', 'llama.cpp'),
    )
    .option(
      '--non-stream-disconnect <what>',
      'what a non-streaming request does when its client leaves: ignore (run to the end, as llama.cpp) ' +
        "or cancel (as vLLM's server) (default ignore)",
      oneOf('ignore', 'cancel'),
    )
    .option(
      '--load-ms <ms>',
      'model load time after start: llama.cpp answers 503 meanwhile, vLLM refuses connections (default 0)',
      milliseconds,
    )
    .option(
      '--ignore-stream-options',
      'streams carry no usage chunk whatever stream_options asks, as a server that does not implement it',
    )
    .option(
      '--vision',
      'the model reads images (image_url parts), as llama-server with its --mmproj projector or a multimodal vLLM model',
    )
    .action(async (flags: SimLlmFlags) => {
      const { startLlmFleet } = await import('../sim/llm/server.js');
      const { replicas, ...options } = flags;
      const fleet = await startLlmFleet(replicas, options);
      for (const replica of fleet) process.stdout.write(`${replica.url}\n`);
      process.stderr.write(
        `kiln sim llm: ${fleet.length} replica(s) serving ${options.model ?? 'sim-llama-3-8b'} ` +
          `as ${options.flavor ?? 'vllm'}; ` +
          'faults: POST /sim/fault; stop with Ctrl-C\n',
      );
      let stopping = false;
      const stop = async () => {
        if (stopping) return;
        stopping = true;
        await Promise.all(fleet.map((replica) => replica.close()));
        process.exit(0);
      };
      process.on('SIGINT', () => void stop());
      process.on('SIGTERM', () => void stop());
    });

  sim
    .command('comfyui')
    .description(
      'a ComfyUI-protocol runner without a GPU: validates workflows against installed model files, ' +
        'queues, reports progress over /ws and renders real WebM clips and PNGs (ffmpeg, sharp); ' +
        'a prompt containing [sim:fail] fails. Prints its URL on stdout and runs until SIGINT or SIGTERM',
    )
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--port <port>', 'port to listen on (0 = any)', integer(0), 8188)
    .option(
      '--models <names>',
      'Kiln models whose template model files are installed, comma-separated, or none (default: every template)',
      modelList,
    )
    .option('--step-ms <ms>', 'simulated time per sampler step (default 20)', milliseconds)
    .option('--steps <n>', 'progress steps per sampler node (default 10)', integer(1))
    .option(
      '--jobs-api',
      "also serve newer ComfyUI builds' /api/jobs/{id} and /api/jobs/{id}/cancel (default: as 0.3.64, which has neither)",
    )
    .action(async (flags: SimComfyuiFlags) => {
      const { startComfySim } = await import('../sim/comfyui/server.js');
      let runner: Awaited<ReturnType<typeof startComfySim>>;
      try {
        runner = await startComfySim(flags);
      } catch (error) {
        process.stderr.write(`kiln sim comfyui: ${(error as Error).message}\n`);
        process.exit(1);
      }
      process.stdout.write(`${runner.url}\n`);
      process.stderr.write(
        `kiln sim comfyui: ComfyUI 0.3.64${flags.jobsApi ? ' with /api/jobs' : ''} serving ${flags.models === undefined ? 'every template' : flags.models.join(', ') || 'no models'}; ` +
          'fault hook: [sim:fail] in a prompt; stop with Ctrl-C\n',
      );
      let stopping = false;
      const stop = async () => {
        if (stopping) return;
        stopping = true;
        await runner.close();
        process.exit(0);
      };
      process.on('SIGINT', () => void stop());
      process.on('SIGTERM', () => void stop());
    });
}
