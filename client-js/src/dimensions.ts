/**
 * A campaign's public breakdown dimensions on the device, as `ldptel.dimensions` and
 * `ldptel.client.reporting.dimension_pairs`: each declared dimension has a closed list of values
 * and the value `"other"`, which takes whatever a report gives that the list does not hold (an
 * unknown value, a value that is not a string, a dimension not given); a dimension with a version
 * `bucket` ("major" or "major.minor") maps a version string to its bucket first ("4.2.17" →
 * "4.2", "v5" → "5.0"). The pairs sent with a report are in the order of the dimension names, as
 * the config lists them. Same mapping as the Python SDK and the collector, on the shared vectors
 * (`testvectors/dimensions.json`).
 */
export const OTHER = "other";
const BUCKETS = ["major", "major.minor"];
// ASCII digits, at most 9 of each: as core/dimensions.py
const VERSION = /^[vV]?([0-9]{1,9})(?:\.([0-9]{1,9}))?/;

export interface Dimension {
  name: string;
  values: string[];
  bucket: string | null;
}

export type Pairs = [string, string][];

/** A version string's bucket ("4.2.17" → "4.2" for major.minor, "4" for major); anything else as
 * it is (then `other` unless declared). */
export function bucketed(value: string, bucket: string | null): string {
  if (bucket === null) return value;
  const m = VERSION.exec(value);
  if (m === null) return value;
  const major = Number(m[1]),
    minor = m[2] === undefined ? 0 : Number(m[2]);
  return bucket === "major" ? `${major}` : `${major}.${minor}`;
}

/** The dimensions of a public config (`Dimensions.from_public`): null without; a malformed list
 * throws (the config is refused). */
export function parseDimensions(raw: unknown): Dimension[] | null {
  if (raw === undefined || raw === null) return null;
  if (!Array.isArray(raw) || raw.length === 0) throw new TypeError("dimensions must be a non-empty list");
  return raw.map((item: unknown) => {
    const d = item as Record<string, unknown>;
    const bucket = d?.bucket ?? null;
    if (
      d === null ||
      typeof d !== "object" ||
      Array.isArray(d) ||
      typeof d.name !== "string" ||
      !Array.isArray(d.values) ||
      !d.values.every((v) => typeof v === "string") ||
      (bucket !== null && !BUCKETS.includes(bucket as string))
    ) {
      throw new TypeError(`malformed dimension ${JSON.stringify(item)}`);
    }
    return { name: d.name, values: d.values as string[], bucket: bucket as string | null };
  });
}

/** The canonical value of what a report gives for `d`. */
// biome-ignore lint/suspicious/noShadowRestrictedNames: a module function (the Python SDK's name), not Object's method
export function valueOf(d: Dimension, given: unknown): string {
  if (typeof given !== "string") return OTHER;
  const value = bucketed(given, d.bucket);
  return d.values.includes(value) ? value : OTHER;
}

/** A name given that the campaign does not declare: the report is refused (a typo must not pass
 * silently); counted as `bad_dimension`. */
export class UndeclaredDimension extends Error {}

const own = (o: Record<string, unknown>, k: string) => Object.hasOwn(o, k);

/** The (name, value) pairs a report of `campaign` carries: the client's `defaults` (names the
 * campaign does not declare are ignored) updated with the call's `given` (an undeclared name
 * throws `UndeclaredDimension`), each mapped to its canonical value. */
export function dimensionPairs(
  campaign: string,
  dims: Dimension[] | null,
  given: Record<string, unknown> | undefined,
  defaults: Record<string, unknown>,
): Pairs {
  const names = dims === null ? [] : dims.map((d) => d.name);
  const undeclared = Object.keys(given ?? {})
    .filter((k) => !names.includes(k))
    .sort();
  if (undeclared.length) {
    throw new UndeclaredDimension(
      `campaign ${JSON.stringify(campaign)} has no dimension ${JSON.stringify(undeclared[0])} ` +
        `(it declares ${names.length ? names.join(", ") : "none"})`,
    );
  }
  if (dims === null) return [];
  return dims.map((d): [string, string] => {
    const v =
      given !== undefined && own(given, d.name) ? given[d.name] : own(defaults, d.name) ? defaults[d.name] : undefined;
    return [d.name, valueOf(d, v)];
  });
}
