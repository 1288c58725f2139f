/** The value of one sample of a /metrics scrape, by its name and exact label set as written; undefined when absent. */
export function sample(scrape: string, series: string): number | undefined {
  const line = scrape.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}
