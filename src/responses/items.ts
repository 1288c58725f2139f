import type { Store } from '../store/index.js';
import type { Problems } from './input.js';
import type { Item, ResponseJobRequest } from './schema.js';

const PREFIX: Record<string, string> = { message: 'msg', function_call: 'fc', function_call_output: 'fco' };

/** Output items are numbered from here, input items from 0: one response's ids never meet. */
const OUTPUT_BASE = 0x8000;

/**
 * An item's id, made from its response's UUID and its place (`msg_<32 hex><4 hex>`): the same at
 * every listing, and enough to find the item again from its id alone (`item_reference`).
 */
export function itemIdOf(uuid: string, type: string, place: { input: number } | { output: number }): string {
  const index = 'input' in place ? place.input : OUTPUT_BASE + place.output;
  return `${PREFIX[type] ?? 'item'}_${uuid.replaceAll('-', '')}${index.toString(16).padStart(4, '0')}`;
}

/** Ids for one response's output items, by their place in the output. */
export const outputIds =
  (uuid: string) =>
  (type: string, index: number): string =>
    itemIdOf(uuid, type, { output: index });

const ITEM_ID = /^[a-z]+_([0-9a-f]{8})([0-9a-f]{4})([0-9a-f]{4})([0-9a-f]{4})([0-9a-f]{12})([0-9a-f]{4})$/;

/**
 * The request's input items with ids: the caller's own where given, else one made from the
 * response's id and the item's place. An assistant message is listed as the output message it
 * was; an image part with its detail.
 */
export function inputItemsOf(uuid: string, request: ResponseJobRequest): Item[] {
  return request.input.map((item, i) => {
    const id = item.id ?? itemIdOf(uuid, item.type, { input: i });
    if (item.type !== 'message') return { status: 'completed', ...item, id };
    const parts = (item.content as Array<Record<string, unknown>>).map((part) => {
      if (part.type === 'output_text') return { annotations: [], logprobs: [], ...part };
      if (part.type === 'input_image') return { detail: 'auto', ...part };
      return part;
    });
    return { ...item, id, ...(item.role === 'assistant' ? { status: 'completed' } : {}), content: parts };
  });
}

/**
 * Each `item_reference` replaced by the item it names: an input or output item of a stored
 * response of this organisation (the AI SDK sends earlier assistant messages this way). A
 * reference Kiln cannot find is a 400 naming it.
 */
export async function resolveReferences(
  store: Store,
  orgId: string,
  items: Item[],
  problems: Problems,
): Promise<Item[]> {
  const resolved: Item[] = [];
  for (const [i, item] of items.entries()) {
    if (item.type !== 'item_reference') {
      resolved.push(item);
      continue;
    }
    const found = await findItem(store, orgId, String(item.id));
    if (found) resolved.push(found);
    else {
      problems.add(
        `input[${i}].id`,
        'exists',
        `input[${i}]: no item '${String(item.id)}' in a stored response of this organisation`,
        item.id,
      );
    }
  }
  return resolved;
}

async function findItem(store: Store, orgId: string, id: string): Promise<Item | undefined> {
  const match = ITEM_ID.exec(id);
  if (!match) return undefined;
  const uuid = match.slice(1, 6).join('-');
  const index = Number.parseInt(match[6] as string, 16);
  const job = await store.jobs.get(orgId, uuid);
  if (job?.kind !== 'response' || (job.expires_at ?? Number.POSITIVE_INFINITY) <= Date.now())
    return undefined;
  const request = JSON.parse(job.request) as ResponseJobRequest;
  if (request.echo?.store === false) return undefined;
  const items =
    index >= OUTPUT_BASE
      ? job.result === null
        ? []
        : (JSON.parse(job.result) as { output: Item[] }).output
      : inputItemsOf(uuid, request);
  const item = items[index >= OUTPUT_BASE ? index - OUTPUT_BASE : index];
  return item?.id === id ? item : undefined;
}
