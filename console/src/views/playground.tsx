import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, api, dataUri, streamChat, TERMINAL } from '../api.js';
import type { Job } from './jobs.js';
import { JobResult } from './result.js';

interface Model {
  id: string;
  kind?: string;
  ready?: boolean;
}

const VIDEO_SIZES = ['832x480', '1280x720', '512x512', '480x832', '720x1280'];

/** Try the gateway from the page: a streamed chat, and a transition between two images. */
export function PlaygroundView() {
  const [models, setModels] = useState<Model[]>([]);
  const [error, setError] = useState<string>();
  useEffect(() => {
    api<{ data: Model[] }>('GET', '/v1/models')
      .then((list) => setModels(list.data))
      .catch((caught: Error) => setError(`Could not load the models: ${caught.message}`));
  }, []);
  return (
    <section aria-labelledby="playground-title">
      <h1 id="playground-title">Playground</h1>
      {error && <p role="alert">{error}</p>}
      <div class="columns">
        <Chat models={models.filter((m) => !m.kind || m.kind === 'chat' || m.kind === 'persona')} />
        <Transition models={models.filter((m) => m.kind === 'video')} />
      </div>
    </section>
  );
}

/** A picker of models, saying which are not ready. */
function ModelSelect(props: { id: string; models: Model[]; value: string; onChange: (id: string) => void }) {
  return (
    <select id={props.id} value={props.value} onChange={(e) => props.onChange(e.currentTarget.value)}>
      {props.models.map((m) => (
        <option key={m.id} value={m.id}>
          {m.id}
          {m.ready === false ? ' (not ready)' : ''}
        </option>
      ))}
    </select>
  );
}

function Chat({ models }: { models: Model[] }) {
  const [model, setModel] = useState('');
  const [prompt, setPrompt] = useState('');
  const [answer, setAnswer] = useState('');
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const chosen = model || models[0]?.id || '';
  const send = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setAnswer('');
    setError(undefined);
    try {
      await streamChat({ model: chosen, messages: [{ role: 'user', content: prompt }] }, (text) =>
        setAnswer((so) => so + text),
      );
    } catch (caught) {
      setError((caught as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="card" onSubmit={send} aria-labelledby="chat-title">
      <h2 id="chat-title">Chat</h2>
      <label for="chat-model">Persona or model</label>
      <ModelSelect id="chat-model" models={models} value={chosen} onChange={setModel} />
      <label for="chat-prompt">Message</label>
      <textarea
        id="chat-prompt"
        rows={4}
        required
        value={prompt}
        onInput={(e) => setPrompt(e.currentTarget.value)}
      />
      <button type="submit" disabled={busy || !chosen}>
        {busy ? 'Streaming…' : 'Send'}
      </button>
      <output class="answer" for="chat-prompt" aria-live="polite" data-testid="chat-answer">
        {answer}
      </output>
      {error && <p role="alert">{error}</p>}
    </form>
  );
}

function Transition({ models }: { models: Model[] }) {
  const start = useRef<HTMLInputElement>(null);
  const end = useRef<HTMLInputElement>(null);
  const [model, setModel] = useState('');
  const [size, setSize] = useState(VIDEO_SIZES[0] as string);
  const [seconds, setSeconds] = useState(2);
  const [job, setJob] = useState<Job>();
  const [error, setError] = useState<string>();
  const chosen = model || models[0]?.id || '';

  // Follow the job until it ends, through passing failures (a restart, a proxy's 503): only a job
  // that is gone, or a key no longer valid, stops it.
  const following = job && !TERMINAL.has(job.status) ? job.id : undefined;
  useEffect(() => {
    if (!following) return;
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const poll = async () => {
      try {
        const next = await api<Job>('GET', `/v1/jobs/${encodeURIComponent(following)}`);
        if (stopped) return;
        setJob(next);
        setError(undefined);
        if (TERMINAL.has(next.status)) return;
      } catch (caught) {
        if (stopped) return;
        if (caught instanceof ApiError && [401, 404, 410].includes(caught.status)) {
          setJob(undefined);
          return setError(`Stopped following ${following}: ${caught.message}`);
        }
        setError(`Could not check ${following}, trying again: ${(caught as Error).message}`);
      }
      timer = setTimeout(poll, 500);
    };
    timer = setTimeout(poll, 500);
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [following]);

  const submit = async (event: Event) => {
    event.preventDefault();
    setError(undefined);
    setJob(undefined);
    const first = start.current?.files?.[0];
    const last = end.current?.files?.[0];
    if (!first) return setError('Choose a start image.');
    try {
      const submitted = await api<{ id: string }>('POST', '/v1/videos/transitions', {
        model: chosen,
        start_image: await dataUri(first),
        ...(last ? { end_image: await dataUri(last) } : {}),
        size,
        duration_seconds: seconds,
      });
      setJob(await api<Job>('GET', `/v1/jobs/${encodeURIComponent(submitted.id)}`));
    } catch (caught) {
      setError((caught as Error).message);
    }
  };
  return (
    <form class="card" onSubmit={submit} aria-labelledby="transition-title">
      <h2 id="transition-title">Transition</h2>
      <label for="start-image">Start image</label>
      <input id="start-image" ref={start} type="file" accept="image/png,image/jpeg,image/webp" required />
      <label for="end-image">End image (optional)</label>
      <input id="end-image" ref={end} type="file" accept="image/png,image/jpeg,image/webp" />
      <label for="video-model">Model</label>
      <ModelSelect id="video-model" models={models} value={chosen} onChange={setModel} />
      <label for="video-size">Size</label>
      <select id="video-size" value={size} onChange={(e) => setSize(e.currentTarget.value)}>
        {VIDEO_SIZES.map((s) => (
          <option key={s}>{s}</option>
        ))}
      </select>
      <label for="video-seconds">Duration (seconds)</label>
      <input
        id="video-seconds"
        type="number"
        min={1}
        max={15}
        value={seconds}
        onInput={(e) => setSeconds(Number(e.currentTarget.value))}
      />
      <button type="submit" disabled={Boolean(job && !TERMINAL.has(job.status))}>
        Make the video
      </button>
      {error && <p role="alert">{error}</p>}
      {job && (
        <div class="transition-job" aria-live="polite">
          <p>
            <a href={`#/jobs/${encodeURIComponent(job.id)}`}>{job.id}</a>:{' '}
            <span class={`status ${job.status}`} data-testid="transition-status">
              {job.status}
            </span>
          </p>
          {!TERMINAL.has(job.status) && (
            <label>
              Progress{' '}
              <progress max={1} value={job.progress ?? undefined} data-testid="transition-progress">
                {Math.round((job.progress ?? 0) * 100)}%
              </progress>
            </label>
          )}
          {job.code && (
            <p role="alert">
              <code>{job.code}</code>: {job.message}
            </p>
          )}
          <JobResult job={job} />
        </div>
      )}
    </form>
  );
}
