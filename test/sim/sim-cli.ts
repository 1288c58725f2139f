/** The real `kiln` program from source (bin/kiln.js runs it from dist/), for `kiln sim …` tests. */
import { main } from '../../src/cli/main.js';

await main(process.argv);
