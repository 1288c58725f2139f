#!/usr/bin/env -S node --no-memory-reducer
// --no-memory-reducer: after half a minute or so without traffic, V8's memory reducer runs full
// collections that throw away much of the optimised code (130 functions in one measurement), and
// the next few thousand requests cost up to four times the CPU until it is compiled again
// (bench/quiet.ts). The image's entrypoint and `npm start` pass the same option; docs/operations.md
// says why.
import { main } from '../dist/cli/main.js';

main(process.argv);
