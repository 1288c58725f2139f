/**
 * Splits a text/event-stream body into the `data:` payloads of its events, as they complete. Bytes
 * are decoded as one UTF-8 stream, so a character split across two network reads stays whole.
 */
export async function* sseData(body: AsyncIterable<Buffer | string>): AsyncGenerator<string> {
  const decoder = new TextDecoder('utf-8');
  let buffered = '';
  for await (const piece of body) {
    buffered += typeof piece === 'string' ? piece : decoder.decode(piece, { stream: true });
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
