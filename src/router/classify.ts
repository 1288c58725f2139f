export type RequestClass = 'shared-prefix' | 'unique' | 'long-context';

/** What the class of a request is decided from. */
export interface ClassInput {
  /** The prompt's size in tokens: exact where an engine counted it, else the calibrated estimate. */
  promptTokens: number;
  /** Tokens of the leading system messages (persona preamble, contexts, the caller's system prompt). */
  leadingTokens: number;
  /** Another request already sent this prompt's leading blocks (the prefix index knows them). */
  seenPrefix: boolean;
  /** The persona says every request of it starts the same way. */
  sharedPreamble: boolean;
  longContextTokens: number;
  sharedPrefixTokens: number;
}

/**
 * The request class (spec section 1.3): long-context past the token threshold; shared-prefix when
 * its leading part is long enough to be worth caching (on its very first appearance), was seen
 * before, or the persona says so; unique otherwise.
 */
export function classify(input: ClassInput): RequestClass {
  if (input.promptTokens > input.longContextTokens) return 'long-context';
  if (input.sharedPreamble || input.seenPrefix || input.leadingTokens >= input.sharedPrefixTokens) {
    return 'shared-prefix';
  }
  return 'unique';
}
