#!/usr/bin/env -S node --no-memory-reducer --max-semi-space-size=64
// --no-memory-reducer: after half a minute or so without traffic, V8's memory reducer runs full
// collections that throw away much of the optimised code (130 functions in one measurement), and
// the next few thousand requests cost up to four times the CPU until it is compiled again
// (bench/quiet.ts). --max-semi-space-size=64: a young generation that may grow to 64 MB a half,
// so that a burst of requests' objects die young instead of being copied into the old generation;
// sync requests cost 4–11 % less CPU. The image's entrypoint and `npm start` pass the same
// options; docs/operations.md says why.
import { main } from '../dist/cli/main.js';

main(process.argv);
