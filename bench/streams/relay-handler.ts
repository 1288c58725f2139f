import type { ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';

/**
 * The bare relays' undici dispatch handler: the engine's status as the response's, and each engine
 * read written onto the client's socket as one HTTP chunk as it arrives, with no parsing.
 */
export function relayTo(res: ServerResponse): Dispatcher.DispatchHandler {
  let started = false;
  return {
    onRequestStart() {},
    onResponseStart(_controller, status) {
      res.writeHead(status, { 'content-type': 'text/event-stream' });
    },
    onResponseData(_controller, chunk: Buffer) {
      // The first read leaves with the headers; later ones as chunks of their own, one write each.
      if (!started || !res.socket) res.write(chunk);
      else res.socket.write(`${chunk.length.toString(16)}\r\n${chunk.toString('latin1')}\r\n`, 'latin1');
      started = true;
    },
    onResponseEnd() {
      res.end();
    },
    onResponseError(_controller, error) {
      res.destroy(error);
    },
  };
}
