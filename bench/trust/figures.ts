// What a trust probe reports: figures for the table `npm run trust` prints, each with the bar it
// must meet. A probe starts what it needs (its own controller process on a free port, in its own
// directory), attacks or breaks it, and measures; it never shares a controller with another probe.

export interface Figure {
  /** The table's section, e.g. "hostile input". */
  section: string;
  /** What was measured, e.g. "5xx answers". */
  name: string;
  /** The measured value as printed, e.g. "0 of 7,248". */
  value: string;
  /** The bar it must meet, as printed, e.g. "0". */
  target: string;
  /** Whether the value meets the bar. */
  ok: boolean;
}

export interface ProbeOptions {
  /** The short version (CI): fewer rounds, short limits; the same checks. */
  short: boolean;
  /** A fresh directory the probe may use as it likes (data dirs, cwd, files). */
  workDir: string;
  /** Progress for the person running it (stderr). */
  log: (message: string) => void;
}

export interface Probe {
  name: string;
  run(opts: ProbeOptions): Promise<Figure[]>;
}

/** A figure that is only reported (no bar beyond being measured). */
export function info(section: string, name: string, value: string): Figure {
  return { section, name, value, target: "", ok: true };
}

/** A figure that must be exactly `want` (e.g. 0 lost writes). */
export function exactly(section: string, name: string, got: number, want: number, of?: number): Figure {
  const value = of === undefined ? fmt(got) : `${fmt(got)} of ${fmt(of)}`;
  return { section, name, value, target: fmt(want), ok: got === want };
}

/** A figure that must be at most `max`, printed with `unit`. */
export function atMost(section: string, name: string, got: number, max: number, unit: string): Figure {
  return { section, name, value: `${fmt(got)} ${unit}`.trim(), target: `≤ ${fmt(max)} ${unit}`.trim(), ok: got <= max };
}

/** Thousands separators, and at most one decimal. */
export function fmt(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  return n.toLocaleString("en-US", { maximumFractionDigits: Math.abs(n) < 10 ? 2 : 1 });
}

/** The figures as a Markdown table (the README quotes it). */
export function table(figures: Figure[]): string {
  const rows = figures.map((f) => `| ${f.section} | ${f.name} | ${f.value} | ${f.target} | ${f.ok ? "yes" : "**NO**"} |`);
  return ["| Area | Figure | Measured | Bar | Met |", "|---|---|---|---|---|", ...rows].join("\n");
}
