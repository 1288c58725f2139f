import type { Limiter } from './admission.js';
import { LIMIT_NAMES } from './schema.js';

/** Limits in Prometheus text: this process's admissions and refusals, and the tiers' defaults. */
export function limitMetrics(limiter: Limiter): string {
  const lines = [
    '# HELP kiln_limit_admissions_total Requests of limited callers admitted by this process.',
    '# TYPE kiln_limit_admissions_total counter',
    `kiln_limit_admissions_total ${limiter.admitted}`,
    '# HELP kiln_limit_rejections_total Requests refused with 429, by the limit broken and whose it was (key or org).',
    '# TYPE kiln_limit_rejections_total counter',
  ];
  for (const [label, n] of [...limiter.rejections].sort()) {
    const [limit, scope] = label.split(':');
    lines.push(`kiln_limit_rejections_total{limit="${limit}",scope="${scope}"} ${n}`);
  }
  lines.push(
    '# HELP kiln_limit_tier_default Default limits of each tier, from limits.tiers.',
    '# TYPE kiln_limit_tier_default gauge',
  );
  for (const [tier, limits] of Object.entries(limiter.settings.tiers)) {
    for (const name of LIMIT_NAMES) {
      const value = limits[name];
      if (value !== undefined) lines.push(`kiln_limit_tier_default{tier="${tier}",limit="${name}"} ${value}`);
    }
  }
  return lines.join('\n');
}
