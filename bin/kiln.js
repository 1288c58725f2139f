#!/usr/bin/env -S node --no-memory-reducer --max-semi-space-size=16
// --no-memory-reducer: after half a minute or so without traffic, V8's memory reducer runs full
// collections that throw away much of the optimised code (130 functions in one measurement), and
// the next few thousand requests cost up to four times the CPU until it is compiled again
// (bench/quiet.ts). --max-semi-space-size=16 (node 20's default, pinned): a young generation of at
// most 16 MB a half. 64 made sync requests 2–11 % cheaper, but each young-generation collection
// then stopped every relayed stream for up to 15 ms, the worst inter-token gaps. The image's
// entrypoint and `npm start` pass the same options; docs/operations.md says why.
import { main } from '../dist/cli/main.js';

main(process.argv);
