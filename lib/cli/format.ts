/** printf-style column helpers for output that lines up with rds-tools'. */
export const r = (v: unknown, w: number): string => String(v).padStart(w);
export const l = (v: unknown, w: number): string => String(v).padEnd(w);

export function parseFlags(
  argv: string[],
  spec: Record<string, 'flag' | 'value'>,
): { opts: Record<string, string | true>; rest: string[] } {
  const opts: Record<string, string | true> = {};
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const kind = spec[a];
    if (kind === undefined) {
      if (a.startsWith('-') && a !== '-') throw new Error(`unknown option ${a}`);
      rest.push(a);
    } else if (kind === 'flag') {
      opts[a] = true;
    } else {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      opts[a] = v;
    }
  }
  return { opts, rest };
}
