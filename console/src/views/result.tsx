import type { Job } from './jobs.js';

/** What a job produced, shown as what it is: text, images, a video that plays here. */
export function JobResult({ job }: { job: Job }) {
  const result = job.result;
  if (!result) return null;
  const chat = result.choices?.[0]?.message?.content ?? result.output_text;
  if (typeof chat === 'string') return <blockquote class="answer">{chat}</blockquote>;
  if (Array.isArray(result.data)) {
    return (
      <div class="images">
        {result.data.map((image, index) => (
          <img
            key={image.url ?? index}
            src={image.url ?? `data:image/png;base64,${image.b64_json}`}
            alt={`result ${index + 1} of ${result.data?.length}`}
          />
        ))}
      </div>
    );
  }
  if (typeof result.url === 'string' && String(result.content_type ?? '').startsWith('video/')) {
    return (
      <video class="clip" src={result.url} controls muted loop autoPlay playsInline>
        <track kind="captions" />
      </video>
    );
  }
  return <pre>{JSON.stringify(result, null, 2)}</pre>;
}
