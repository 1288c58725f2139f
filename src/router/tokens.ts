/** Characters per token before any engine has said otherwise: English text on BPE tokenisers. */
const DEFAULT_CHARS_PER_TOKEN = 4;
/** How much each new observation moves the estimate. */
const LEARNING_RATE = 0.2;

/**
 * Characters per token, per model, learnt from what engines report: `usage.prompt_tokens` of every
 * answer and the counts of /tokenize. Code, numbers and non-Latin scripts run far denser than the
 * four characters a token of English, and a fleet usually serves one kind of traffic per model.
 */
export class TokenCalibration {
  readonly #charsPerToken = new Map<string, number>();

  charsPerToken(model: string): number {
    return this.#charsPerToken.get(model) ?? DEFAULT_CHARS_PER_TOKEN;
  }

  estimate(model: string, chars: number): number {
    return Math.ceil(chars / this.charsPerToken(model));
  }

  /** Folds in one observation: `chars` of routing text that the engine counted as `tokens`. */
  learn(model: string, chars: number, tokens: number): void {
    // Short prompts say more about the chat template's overhead than about the text.
    if (!(tokens >= 32) || !(chars > 0)) return;
    const observed = Math.min(16, Math.max(0.25, chars / tokens));
    const known = this.#charsPerToken.get(model);
    this.#charsPerToken.set(
      model,
      known === undefined ? observed : known + LEARNING_RATE * (observed - known),
    );
  }
}
