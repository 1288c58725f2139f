/** Splits a text/event-stream body into the `data:` payloads of its events, as they complete. */
export async function* sseData(body: AsyncIterable<Buffer | string>): AsyncGenerator<string> {
  let buffered = '';
  for await (const piece of body) {
    buffered += typeof piece === 'string' ? piece : piece.toString('utf8');
    let end = buffered.search(/\r?\n\r?\n/);
    while (end !== -1) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end).replace(/^\r?\n\r?\n/, '');
      const data = event
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''))
        .join('\n');
      if (data) yield data;
      end = buffered.search(/\r?\n\r?\n/);
    }
  }
}
