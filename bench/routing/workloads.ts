/**
 * The routing benchmark's workloads, generated deterministically from a seed: prompts of random
 * English words sized in the simulator's own tokens (src/sim/llm/text.ts `countTokens`).
 */
import { countTokens, renderChatPrompt, seededRandom } from '../../src/sim/llm/text.js';

export interface Message {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/**
 * A run of turns sent one after another: turn k + 1 only after turn k's answer, with every earlier
 * message (the answers as they came back) in front of it. A single-turn session is one request.
 */
export interface Session {
  system: string;
  users: string[];
}

export type WorkloadName = 'gsp' | 'zipf' | 'multiturn';

export interface Workload {
  name: WorkloadName;
  title: string;
  /** What was generated, for the report. */
  description: string;
  /** Sessions, in the order their first turns are sent. */
  sessions: Session[];
  /** `max_tokens` of every request (the simulator generates exactly that many). */
  maxTokens: number;
  /**
   * Tokens of every distinct prefix the workload makes the replicas hold (each prompt's leading part
   * that a later prompt can reuse), as the simulator renders and counts them: the KV capacity is a
   * share of this.
   */
  distinctPrefixTokens: number;
  requests: number;
}

/** sfc32 seeded from a hash of `key` (the simulator's own): the same key always gives the same stream. */
export const random = seededRandom;

const WORDS = (
  'the of and to in is that for it as was with be by on not he this are or his from at which but ' +
  'have an they you were her she there been one all we their has would when if so no what can out ' +
  'other into more some time could about than only new first these may then do any like two such ' +
  'made over did many after before where most through back years much should well people each just ' +
  'state world house under between never another while last might great little still public found ' +
  'system report market window garden river number question service station kitchen morning history ' +
  'clay kiln glaze fire wheel bowl heat stone salt iron ash cup pot slow warm cool shape form hand ' +
  'engine replica router prefix cache token request answer latency throughput policy memory schedule ' +
  'mountain village harbour library teacher student evening weather journey'
).split(' ');

/** A word's tokens when it follows another word after a space (a word's tokens do not depend on what came before). */
const WORD_TOKENS = new Map(WORDS.map((w) => [w, countTokens(` ${w}`)]));
const ONE_TOKEN = WORDS.filter((w) => WORD_TOKENS.get(w) === 1);

/** Random words, sentence-cased now and then, of exactly `tokens` tokens by the simulator's tokenizer. */
export function wordsOfTokens(rng: () => number, tokens: number): string {
  const parts: string[] = [];
  let left = tokens;
  let sentenceStart = true;
  while (left > 0) {
    let word = WORDS[Math.floor(rng() * WORDS.length)] as string;
    // Words only: the first lacks the leading space, which never changes a word's token count.
    if ((WORD_TOKENS.get(word) as number) > left)
      word = ONE_TOKEN[Math.floor(rng() * ONE_TOKEN.length)] as string;
    left -= WORD_TOKENS.get(word) as number;
    if (sentenceStart) word = (word[0] as string).toUpperCase() + word.slice(1);
    sentenceStart = left > 1 && rng() < 0.08;
    // A full stop is a token of its own: only where one is left for it.
    if (sentenceStart) {
      word += '.';
      left--;
    }
    parts.push(word);
  }
  const text = parts.join(' ');
  const counted = countTokens(text);
  if (counted !== tokens) throw new Error(`generated ${counted} tokens where ${tokens} were asked`);
  return text;
}

/** Tokens the simulator counts for these messages rendered as a prompt without the assistant's turn. */
const renderedTokens = (messages: Message[]) => countTokens(renderChatPrompt(messages, false));

export interface SharedPrefixSettings {
  seed: string;
  groups: number;
  promptsPerGroup: number;
  systemTokens: number;
  questionTokens: number;
  maxTokens: number;
}

/** SGLang bench_serving's generated-shared-prefix dataset: every group's prompts, all shuffled. */
export function sharedPrefix(s: SharedPrefixSettings): Workload {
  const systems = groupSystems(s);
  const sessions: Session[] = [];
  for (let g = 0; g < s.groups; g++) {
    for (let p = 0; p < s.promptsPerGroup; p++) {
      const rng = random(`${s.seed}:gsp:question:${g}:${p}`);
      sessions.push({ system: systems[g] as string, users: [wordsOfTokens(rng, s.questionTokens)] });
    }
  }
  const shuffle = random(`${s.seed}:gsp:shuffle`);
  for (let i = sessions.length - 1; i > 0; i--) {
    const j = Math.floor(shuffle() * (i + 1));
    [sessions[i], sessions[j]] = [sessions[j] as Session, sessions[i] as Session];
  }
  return {
    name: 'gsp',
    title: 'Generated shared prefix',
    description: `${s.groups} groups × ${s.promptsPerGroup} prompts, each group a ${s.systemTokens.toLocaleString('en')}-token system prompt, each prompt a ${s.questionTokens}-token question, \`max_tokens: ${s.maxTokens}\`, all ${sessions.length.toLocaleString('en')} requests shuffled (SGLang bench_serving's \`generated-shared-prefix\` defaults)`,
    sessions,
    maxTokens: s.maxTokens,
    distinctPrefixTokens: systems.reduce(
      (sum, system) => sum + renderedTokens([{ role: 'system', content: system }]),
      0,
    ),
    requests: sessions.length,
  };
}

function groupSystems(s: { seed: string; groups: number; systemTokens: number }): string[] {
  return Array.from({ length: s.groups }, (_, g) =>
    wordsOfTokens(random(`${s.seed}:system:${g}`), s.systemTokens),
  );
}

export interface ZipfSettings extends SharedPrefixSettings {
  /** Requests in all; each draws its group. */
  requests: number;
  /** P(group of popularity rank k) ∝ 1 / k^exponent. */
  exponent: number;
}

/** The same groups, their popularity Zipf-skewed: each request draws its group, then a fresh question. */
export function zipf(s: ZipfSettings): Workload {
  const systems = groupSystems(s);
  const weights = systems.map((_, k) => 1 / (k + 1) ** s.exponent);
  const total = weights.reduce((a, b) => a + b, 0);
  const rng = random(`${s.seed}:zipf:draw`);
  const sessions: Session[] = [];
  const drawn = new Set<number>();
  for (let i = 0; i < s.requests; i++) {
    let u = rng() * total;
    let g = 0;
    while (g < weights.length - 1 && u >= (weights[g] as number)) u -= weights[g++] as number;
    drawn.add(g);
    const question = wordsOfTokens(random(`${s.seed}:zipf:question:${i}`), s.questionTokens);
    sessions.push({ system: systems[g] as string, users: [question] });
  }
  const top = (weights[0] as number) / total;
  return {
    name: 'zipf',
    title: 'Shared prefix, Zipf-skewed groups',
    description: `${s.requests.toLocaleString('en')} requests, each drawing one of the same ${s.groups} groups with P(rank k) ∝ 1/k^${s.exponent} (the most popular group ${(top * 100).toFixed(0)} % of requests; ${drawn.size} groups drawn at least once), then a fresh ${s.questionTokens}-token question, \`max_tokens: ${s.maxTokens}\``,
    sessions,
    maxTokens: s.maxTokens,
    distinctPrefixTokens: [...drawn].reduce(
      (sum, g) => sum + renderedTokens([{ role: 'system', content: systems[g] as string }]),
      0,
    ),
    requests: sessions.length,
  };
}

export interface MultiTurnSettings {
  seed: string;
  conversations: number;
  turns: number;
  systemTokens: number;
  userTokens: number;
  maxTokens: number;
}

/** Conversations, each with a system prompt of its own, whose every turn carries the whole history. */
export function multiTurn(s: MultiTurnSettings): Workload {
  const sessions: Session[] = Array.from({ length: s.conversations }, (_, c) => {
    const rng = random(`${s.seed}:multiturn:${c}`);
    return {
      system: wordsOfTokens(rng, s.systemTokens),
      users: Array.from({ length: s.turns }, () => wordsOfTokens(rng, s.userTokens)),
    };
  });
  // A conversation's last prompt holds everything a cache can reuse of it; answers are estimated at
  // max_tokens (the simulator generates exactly that many, in short words that re-tokenise about 1:1).
  const distinct = sessions.reduce((sum, session) => {
    const messages: Message[] = [{ role: 'system', content: session.system }];
    for (const user of session.users) messages.push({ role: 'user', content: user });
    return sum + renderedTokens(messages) + (s.turns - 1) * (s.maxTokens + 4);
  }, 0);
  return {
    name: 'multiturn',
    title: 'Multi-turn conversations',
    description: `${s.conversations} conversations × ${s.turns} turns, each with a ${s.systemTokens.toLocaleString('en')}-token system prompt of its own; each turn sends every earlier message (the answers as they came back) and a new ${s.userTokens}-token user message, \`max_tokens: ${s.maxTokens}\`; a conversation's next turn is sent only after its answer, and queues behind the turns already waiting`,
    sessions,
    maxTokens: s.maxTokens,
    distinctPrefixTokens: distinct,
    requests: s.conversations * s.turns,
  };
}
