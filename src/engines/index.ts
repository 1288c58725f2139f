import type { Config } from '../config/schema.js';
import { OpenAICompatibleAdapter } from './openai/adapter.js';
import type { EngineAdapter } from './types.js';

export * from './types.js';

type AdapterName = Config['engines'][string]['adapter'];

/** The adapter for each protocol a config may name; adding one is a folder and a line here. */
const adapters: Record<AdapterName, () => EngineAdapter> = {
  openai: () => new OpenAICompatibleAdapter(),
};

export function createAdapter(name: AdapterName): EngineAdapter {
  return adapters[name]();
}
