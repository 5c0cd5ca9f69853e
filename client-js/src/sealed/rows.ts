/**
 * A report as the plaintext of one sealed message (`ldptel.mechanisms.rows`): a fixed-width row
 * per mechanism, little-endian — GRR and the histogram `values` u32; OLH `seeds` u32 then
 * `values` u32; Hadamard `indices` u32 then `signs` u8 (0/1); SUE/OUE the packed bit row
 * (⌈d/8⌉ bytes); RAPPOR `cohorts` u32 then the packed Bloom bits (⌈k/8⌉ bytes); heavy hitters
 * (`shuffled`: the local report at ε₀) `levels`, `seed_indices`, `values` u32 each (12 bytes). Every
 * row of one campaign version has the same width, so every ciphertext has the same length and a fake message
 * cannot be told from a real one by its size.
 */
import type { Mechanism, Report } from "../mechanisms/base.js";

type Field = [column: string, kind: "u32" | "u8" | "bits"];

/** The row layout of `mech` and its width in bytes; null for a mechanism without one (it cannot
 * be sent in a shuffled privacy mode). */
export function rowLayout(mech: Mechanism): { fields: Field[]; width: number } | null {
  const m = mech as { domainSize?: number; alphabet?: number };
  const d = m.domainSize ?? m.alphabet ?? 0; // memoized SUE/OUE keep d as their alphabet
  switch (mech.name) {
    case "grr":
    case "histogram":
      return { fields: [["values", "u32"]], width: 4 };
    case "olh":
      return {
        fields: [
          ["seeds", "u32"],
          ["values", "u32"],
        ],
        width: 8,
      };
    case "hadamard":
      return {
        fields: [
          ["indices", "u32"],
          ["signs", "u8"],
        ],
        width: 5,
      };
    case "sue":
    case "oue":
      return { fields: [["bits", "bits"]], width: Math.ceil(d / 8) };
    case "heavy_hitters":
      return {
        fields: [
          ["levels", "u32"],
          ["seed_indices", "u32"],
          ["values", "u32"],
        ],
        width: 12,
      };
    case "rappor": {
      const k = (mech as { bloomBits?: number }).bloomBits ?? 0;
      return {
        fields: [
          ["cohorts", "u32"],
          ["bits", "bits"],
        ],
        width: 4 + Math.ceil(k / 8),
      };
    }
    default:
      return null;
  }
}

/** The row of one report (its columns hold one entry each). */
export function rowOf(mech: Mechanism, report: Report): Uint8Array {
  const layout = rowLayout(mech);
  if (layout === null) throw new TypeError(`no row layout for mechanism ${mech.name}`);
  const out = new Uint8Array(layout.width);
  const view = new DataView(out.buffer);
  let at = 0;
  for (const [column, kind] of layout.fields) {
    const cell = report.columns[column]?.[0];
    if (cell === undefined) throw new TypeError(`report without ${column}`);
    if (kind === "u32") {
      view.setUint32(at, cell as number, true);
      at += 4;
    } else if (kind === "u8") {
      out[at++] = cell ? 1 : 0;
    } else {
      const bits = cell as Uint8Array;
      out.set(bits, at);
      at += bits.length;
    }
  }
  if (at !== layout.width) throw new TypeError(`a row of ${at} bytes, not ${layout.width}`);
  return out;
}

/** An index's row (a fake message of `shuffled-fakes`: GRR and the histogram send indices). */
export function indexRow(index: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, index, true);
  return out;
}
