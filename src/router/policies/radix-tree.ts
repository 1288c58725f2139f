/**
 * The approximate radix tree of SGLang's cache-aware router (sgl-model-gateway
 * `src/policies/tree.rs`): one character-level tree for all workers, edges holding strings, each
 * node tagged with the tenants (workers) that were sent its text and, per tenant, the epoch of its
 * last access. A tenant on a node is on every ancestor too, so the tenants of the deepest node a
 * prompt reaches all hold the whole matched prefix. Sizes are per tenant, in characters.
 *
 * Characters are UTF-16 code units where SGLang counts Unicode scalar values: the same for text
 * in the Basic Multilingual Plane, and it keeps matching at native string speed.
 */

interface RadixNode {
  /** The edge's text; empty only at the root. */
  text: string;
  parent: RadixNode | undefined;
  /** Keyed by the first code unit of the child's text. */
  readonly children: Map<number, RadixNode>;
  /** Tenant → epoch of its last access here; 0 on nodes a tenant only passed through. */
  readonly tenants: Map<string, number>;
  /** The tenant a match answers with when several hold the node: the one that created it. */
  lastTenant: string | undefined;
}

/** Where a prompt's prefix ends in the tree. */
export interface PrefixMatch {
  /** Characters of the prompt found in the tree, on nodes some eligible tenant holds. */
  readonly matchedChars: number;
  /** The eligible tenant the match answers with; undefined when no eligible tenant holds any of it. */
  readonly tenant: string | undefined;
  /** Every tenant holding the matched prefix (a live view: read it before the next insert). */
  readonly holders: ReadonlyMap<string, number>;
}

const newNode = (text: string, parent: RadixNode | undefined, lastTenant?: string): RadixNode => ({
  text,
  parent,
  children: new Map(),
  tenants: new Map(),
  lastTenant,
});

/** Characters `text` from `at` shares with the start of `edge`. */
function sharedLength(text: string, at: number, edge: string): number {
  if (text.startsWith(edge, at)) return edge.length;
  const limit = Math.min(edge.length, text.length - at);
  let shared = 0;
  while (shared < limit && text.charCodeAt(at + shared) === edge.charCodeAt(shared)) shared++;
  return shared;
}

const holdsBelow = (node: RadixNode, tenant: string): boolean => {
  for (const child of node.children.values()) if (child.tenants.has(tenant)) return true;
  return false;
};

/** A node no child of which the tenant holds: where its eviction starts. */
const isLeafFor = (node: RadixNode, tenant: string): boolean =>
  node.tenants.has(tenant) && !holdsBelow(node, tenant);

export class ApproximateRadixTree {
  readonly #root = newNode('', undefined);
  readonly #chars = new Map<string, number>();
  /** A counter, not a clock: LRU needs only the order of accesses (as SGLang's `get_epoch`). */
  #epoch = 0;

  #nextEpoch(): number {
    return this.#epoch++;
  }

  #addChars(tenant: string, chars: number): void {
    this.#chars.set(tenant, (this.#chars.get(tenant) ?? 0) + chars);
  }

  /** Characters the tree holds for `tenant` (its approximate cache size); 0 for an unknown tenant. */
  tenantChars(tenant: string): number {
    return this.#chars.get(tenant) ?? 0;
  }

  /** Records that `tenant` was sent `text`: every node on its path gains the tenant, the last one a fresh epoch. */
  insert(text: string, tenant: string): void {
    const root = this.#root;
    if (!root.tenants.has(tenant)) root.tenants.set(tenant, 0);
    if (!this.#chars.has(tenant)) this.#chars.set(tenant, 0);
    let node = root;
    let at = 0;
    while (at < text.length) {
      const key = text.charCodeAt(at);
      const child = node.children.get(key);
      if (child === undefined) {
        const leaf = newNode(text.slice(at), node, tenant);
        leaf.tenants.set(tenant, this.#nextEpoch());
        this.#addChars(tenant, text.length - at);
        node.children.set(key, leaf);
        return;
      }
      const shared = sharedLength(text, at, child.text);
      let next = child;
      if (shared < child.text.length) {
        // Split the edge: the shared part becomes a node holding everything the old one held.
        next = newNode(child.text.slice(0, shared), node, child.lastTenant);
        for (const [holder, epoch] of child.tenants) next.tenants.set(holder, epoch);
        child.text = child.text.slice(shared);
        child.parent = next;
        next.children.set(child.text.charCodeAt(0), child);
        node.children.set(key, next);
      }
      if (!next.tenants.has(tenant)) {
        next.tenants.set(tenant, 0);
        this.#addChars(tenant, next.text.length);
      }
      node = next;
      at += shared;
    }
    node.tenants.set(tenant, this.#nextEpoch());
  }

  /**
   * The longest prefix of `text` in the tree that an `eligible` tenant holds (any tenant when
   * `eligible` is undefined). Ties go to the tenant that created the deepest node, else to the
   * first eligible one recorded there.
   */
  prefixMatch(text: string, eligible?: ReadonlySet<string>): PrefixMatch {
    const holdsEligible = (node: RadixNode): boolean => {
      if (eligible === undefined) return node.tenants.size > 0;
      for (const tenant of eligible) if (node.tenants.has(tenant)) return true;
      return false;
    };
    let node = this.#root;
    let matchedChars = 0;
    let at = 0;
    while (at < text.length) {
      const child = node.children.get(text.charCodeAt(at));
      if (child === undefined || !holdsEligible(child)) break;
      const shared = sharedLength(text, at, child.text);
      matchedChars += shared;
      at += shared;
      node = child;
      if (shared < child.text.length) break;
    }

    if (node.lastTenant === undefined || !node.tenants.has(node.lastTenant)) {
      node.lastTenant = node.tenants.keys().next().value;
    }
    let tenant: string | undefined;
    if (node.lastTenant !== undefined && (eligible === undefined || eligible.has(node.lastTenant))) {
      tenant = node.lastTenant;
    } else {
      for (const holder of node.tenants.keys()) {
        if (eligible === undefined || eligible.has(holder)) {
          tenant = holder;
          break;
        }
      }
    }

    // SGLang refreshes the matched node's epoch on one match in eight: approximate LRU is enough.
    const epoch = this.#nextEpoch();
    if ((epoch & 7) === 0 && tenant !== undefined) node.tenants.set(tenant, epoch);
    return { matchedChars: tenant === undefined ? 0 : matchedChars, tenant, holders: node.tenants };
  }

  /**
   * Trims every tenant over `maxChars` characters by dropping its least recently used leaves,
   * oldest first; a parent left without the tenant below it becomes a leaf in turn.
   */
  evictToSize(maxChars: number): void {
    const over = new Set<string>();
    for (const [tenant, chars] of this.#chars) if (chars > maxChars) over.add(tenant);
    if (over.size === 0) return;

    const heap = new EpochHeap();
    const stack = [this.#root];
    for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
      for (const child of node.children.values()) stack.push(child);
      for (const [tenant, epoch] of node.tenants) {
        if (over.has(tenant) && isLeafFor(node, tenant)) heap.push({ epoch, tenant, node });
      }
    }

    for (let entry = heap.pop(); entry !== undefined; entry = heap.pop()) {
      const { tenant, node } = entry;
      const chars = this.#chars.get(tenant) ?? 0;
      if (chars <= maxChars || !isLeafFor(node, tenant)) continue;
      this.#chars.set(tenant, Math.max(0, chars - node.text.length));
      node.tenants.delete(tenant);
      const parent = node.parent;
      if (parent === undefined) continue;
      if (node.children.size === 0 && node.tenants.size === 0)
        parent.children.delete(node.text.charCodeAt(0));
      const parentEpoch = parent.tenants.get(tenant);
      if (parentEpoch !== undefined && !holdsBelow(parent, tenant)) {
        heap.push({ epoch: parentEpoch, tenant, node: parent });
      }
    }
  }

  /** Drops `tenant` from every node, and nodes nobody holds any more. */
  removeTenant(tenant: string): void {
    // The tenant's nodes form a subtree from the root; visiting it in reverse pre-order clears
    // children before their parents, so emptied nodes can be unlinked as we go.
    const held: RadixNode[] = [];
    const stack = [this.#root];
    for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
      if (!node.tenants.has(tenant)) continue;
      held.push(node);
      for (const child of node.children.values()) stack.push(child);
    }
    for (let i = held.length - 1; i >= 0; i--) {
      const node = held[i] as RadixNode;
      node.tenants.delete(tenant);
      if (node.parent !== undefined && node.children.size === 0 && node.tenants.size === 0) {
        node.parent.children.delete(node.text.charCodeAt(0));
      }
    }
    this.#chars.delete(tenant);
  }
}

interface EvictionEntry {
  epoch: number;
  tenant: string;
  node: RadixNode;
}

/** A binary min-heap of eviction candidates by epoch. */
class EpochHeap {
  readonly #items: EvictionEntry[] = [];

  push(entry: EvictionEntry): void {
    const items = this.#items;
    items.push(entry);
    let i = items.length - 1;
    while (i > 0) {
      const up = (i - 1) >> 1;
      const parent = items[up] as EvictionEntry;
      if (parent.epoch <= entry.epoch) break;
      items[i] = parent;
      i = up;
    }
    items[i] = entry;
  }

  pop(): EvictionEntry | undefined {
    const items = this.#items;
    const top = items[0];
    const last = items.pop();
    if (top === undefined || last === undefined || items.length === 0) return top;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= items.length) break;
      const right = left + 1;
      const leftItem = items[left] as EvictionEntry;
      const rightItem = items[right];
      const [child, childItem] =
        rightItem !== undefined && rightItem.epoch < leftItem.epoch ? [right, rightItem] : [left, leftItem];
      if (childItem.epoch >= last.epoch) break;
      items[i] = childItem;
      i = child;
    }
    items[i] = last;
    return top;
  }
}
