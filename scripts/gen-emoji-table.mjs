#!/usr/bin/env node
// Writes core/src/jsregex/emoji_table.rs: the Unicode properties of strings
// of the RegExp `v` flag (Basic_Emoji, Emoji_Keycap_Sequence,
// RGI_Emoji_Modifier_Sequence, RGI_Emoji_Flag_Sequence,
// RGI_Emoji_Tag_Sequence, RGI_Emoji_ZWJ_Sequence; RGI_Emoji is their union),
// from the npm package @unicode/unicode-<version> (node-unicode: the data of
// Unicode's emoji-sequences.txt and emoji-zwj-sequences.txt, as Babel's
// regexpu uses it for these properties).
//
// The version must be the Unicode version of the Node the differential test
// runs (process.versions.unicode): V8 takes these sets from its ICU.
//
// The table is compact (the wasm build carries it): code point ranges, and
// the ZWJ sequences as templates in which a skin tone stands for all five.
// The script checks that its encoding expands back to exactly the package's
// sets before it writes anything.
//
// Usage: node scripts/gen-emoji-table.mjs [path/to/unpacked/package]
// Without a path it fetches the package with `npm pack` into a temporary
// directory.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const UNICODE = "17.0.0";
const PACKAGE = `@unicode/unicode-${UNICODE}@2.1.0`;
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const out = path.join(root, "core/src/jsregex/emoji_table.rs");

const ZWJ = 0x200d;
const VS16 = 0xfe0f;
const KEYCAP = 0x20e3;
const TONES = [0x1f3fb, 0x1f3fc, 0x1f3fd, 0x1f3fe, 0x1f3ff];
const REGIONAL_A = 0x1f1e6;
const BLACK_FLAG = 0x1f3f4;
const CANCEL_TAG = 0xe007f;
const TAG_OFFSET = 0xe0000;
// Markers of the ZWJ templates (none of them occurs in an emoji sequence).
const M_SEP = "|";
const M_ZWJ = "_";
const M_VS16 = "!";
const M_TONE = "*";
const M_OTHER_TONE = "%";

function fail(message) {
  throw new Error(`gen-emoji-table: ${message}`);
}

/** The package's directory: the argument, or a fresh `npm pack` of it. */
function packageDir() {
  if (process.argv[2]) return { dir: path.resolve(process.argv[2]), cleanup() {} };
  const tmp = mkdtempSync(path.join(tmpdir(), "emoji-table-"));
  const tgz = execFileSync("npm", ["pack", "--silent", PACKAGE], { cwd: tmp, encoding: "utf8" }).trim().split("\n").at(-1);
  execFileSync("tar", ["xzf", tgz], { cwd: tmp });
  return { dir: path.join(tmp, "package"), cleanup: () => rmSync(tmp, { recursive: true, force: true }) };
}

const cps = (s) => [...s].map((c) => c.codePointAt(0));
const key = (list) => list.join(",");

/** Sorted inclusive ranges of a list of code points. */
function ranges(list) {
  const out = [];
  for (const c of [...new Set(list)].sort((a, b) => a - b)) {
    const last = out.at(-1);
    if (last && last[1] + 1 === c) last[1] = c;
    else out.push([c, c]);
  }
  return out;
}

const expandRanges = (rs) => rs.flatMap(([a, b]) => Array.from({ length: b - a + 1 }, (_, i) => a + i));

/** Encodes the ZWJ sequences as templates; a tone slot stands for all five tones (or, after another slot, the four others). */
function zwjTemplates(sequences) {
  const byTemplate = new Map();
  for (const s of sequences) {
    const tones = [];
    let template = "";
    for (const c of cps(s)) {
      if (TONES.includes(c)) {
        tones.push(TONES.indexOf(c));
        template += M_TONE;
      } else if (c === ZWJ) template += M_ZWJ;
      else if (c === VS16) template += M_VS16;
      else if (c < 0x80) fail(`ASCII in a ZWJ sequence: ${key(cps(s))}`);
      else template += String.fromCodePoint(c);
    }
    if (!byTemplate.has(template)) byTemplate.set(template, new Set());
    byTemplate.get(template).add(tones.join(""));
  }
  const templates = [];
  for (const [template, tones] of byTemplate) {
    const slots = template.split(M_TONE).length - 1;
    const all = expandTones(template).length;
    const differing = expandTones(otherTone(template)).length;
    if (tones.size === all) templates.push(template);
    else if (slots === 2 && tones.size === differing && [...tones].every((t) => t[0] !== t[1])) templates.push(otherTone(template));
    else fail(`ZWJ template ${template} has tones ${[...tones]}: neither all nor all the differing ones`);
  }
  return templates;
}

/** The template with its last tone slot made "another tone". */
function otherTone(template) {
  const i = template.lastIndexOf(M_TONE);
  return i < 0 ? template : template.slice(0, i) + M_OTHER_TONE + template.slice(i + 1);
}

/** Every sequence a template stands for (the decoder in emoji.rs does the same). */
function expandTones(template) {
  let partial = [[[], -1]];
  for (const ch of template) {
    const next = [];
    for (const [seq, tone] of partial) {
      if (ch === M_TONE || ch === M_OTHER_TONE) {
        TONES.forEach((t, i) => {
          if (ch === M_OTHER_TONE && i === tone) return;
          next.push([[...seq, t], i]);
        });
      } else {
        const c = ch === M_ZWJ ? ZWJ : ch === M_VS16 ? VS16 : ch.codePointAt(0);
        next.push([[...seq, c], tone]);
      }
    }
    partial = next;
  }
  return partial.map(([seq]) => seq);
}

async function main() {
  const { dir, cleanup } = packageDir();
  try {
    const load = async (name) => (await import(pathToFileURL(path.join(dir, "Sequence_Property", name, "index.mjs")).href)).default.map(cps);
    const basic = await load("Basic_Emoji");
    const keycaps = await load("Emoji_Keycap_Sequence");
    const modifiers = await load("RGI_Emoji_Modifier_Sequence");
    const flags = await load("RGI_Emoji_Flag_Sequence");
    const tags = await load("RGI_Emoji_Tag_Sequence");
    const zwj = await load("RGI_Emoji_ZWJ_Sequence");
    const rgi = await load("RGI_Emoji");

    const basicSingle = ranges(basic.filter((s) => s.length === 1).map((s) => s[0]));
    const basicVs16 = ranges(basic.filter((s) => s.length === 2 && s[1] === VS16).map((s) => s[0]));
    const keycapBases = keycaps.map((s) => String.fromCodePoint(s[0])).join("");
    const modifierBases = ranges(modifiers.map((s) => s[0]));
    const flagLetters = flags.map((s) => s.map((c) => String.fromCharCode(c - REGIONAL_A + 65)).join(""));
    const tagLetters = tags.map((s) => s.slice(1, -1).map((c) => String.fromCharCode(c - TAG_OFFSET)).join(""));
    const templates = zwjTemplates(zwj.map((s) => String.fromCodePoint(...s)));

    // The encoding must give back exactly what the package lists.
    const decoded = {
      basic: [...expandRanges(basicSingle).map((c) => [c]), ...expandRanges(basicVs16).map((c) => [c, VS16])],
      keycaps: [...keycapBases].map((c) => [c.codePointAt(0), VS16, KEYCAP]),
      modifiers: expandRanges(modifierBases).flatMap((c) => TONES.map((t) => [c, t])),
      flags: flagLetters.map((p) => [...p].map((l) => REGIONAL_A + l.charCodeAt(0) - 65)),
      tags: tagLetters.map((t) => [BLACK_FLAG, ...[...t].map((l) => TAG_OFFSET + l.charCodeAt(0)), CANCEL_TAG]),
      zwj: templates.flatMap(expandTones),
    };
    const same = (name, want, got) => {
      const a = new Set(want.map(key));
      const b = new Set(got.map(key));
      if (a.size !== want.length || b.size !== got.length || a.size !== b.size || [...a].some((k) => !b.has(k))) fail(`${name}: the encoding does not give back the package's ${want.length} sequences`);
    };
    same("Basic_Emoji", basic, decoded.basic);
    same("Emoji_Keycap_Sequence", keycaps, decoded.keycaps);
    same("RGI_Emoji_Modifier_Sequence", modifiers, decoded.modifiers);
    same("RGI_Emoji_Flag_Sequence", flags, decoded.flags);
    same("RGI_Emoji_Tag_Sequence", tags, decoded.tags);
    same("RGI_Emoji_ZWJ_Sequence", zwj, decoded.zwj);
    same("RGI_Emoji", rgi, Object.values(decoded).flat());
    for (const t of templates) if (t.includes(M_SEP)) fail(`a template contains ${M_SEP}`);

    writeFileSync(out, rust({ basicSingle, basicVs16, keycapBases, modifierBases, flagLetters, tagLetters, templates, counts: { basic, keycaps, modifiers, flags, tags, zwj, rgi } }));
    console.log(`wrote ${path.relative(root, out)}: RGI_Emoji ${rgi.length} sequences (ZWJ as ${templates.length} templates)`);
    if (process.versions.unicode && !UNICODE.startsWith(process.versions.unicode)) {
      console.warn(`note: this Node implements Unicode ${process.versions.unicode}, the table is ${UNICODE}`);
    }
  } finally {
    cleanup();
  }
}

const hex = (c) => `0x${c.toString(16).toUpperCase()}`;
const rangeList = (rs) => rs.map(([a, b]) => `(${hex(a)}, ${hex(b)})`);

/** One item a line, as rustfmt writes an array of tuples. */
const lines = (items) => items.map((item) => `    ${item},`).join("\n");

/** A long string literal over several lines (`\` continuations drop the line breaks and indents). */
function longString(parts, sep) {
  const text = parts.join(sep);
  const lines = [];
  let line = "";
  for (const ch of text) {
    line += ch;
    if (ch === sep && [...line].length >= 40) {
      lines.push(line);
      line = "";
    }
  }
  if (line) lines.push(line);
  return `"\\\n${lines.map((l) => `    ${l}`).join("\\\n")}"`;
}

function rust(t) {
  const n = (list) => list.length;
  return `//! The Unicode properties of strings of the RegExp \`v\` flag, from Unicode ${UNICODE}'s
//! emoji-sequences.txt and emoji-zwj-sequences.txt (the version of Node 20's ICU).
//!
//! Generated by \`scripts/gen-emoji-table.mjs\` from the npm package
//! ${PACKAGE}; do not edit. Counts: Basic_Emoji ${n(t.counts.basic)}, Emoji_Keycap_Sequence ${n(t.counts.keycaps)},
//! RGI_Emoji_Modifier_Sequence ${n(t.counts.modifiers)}, RGI_Emoji_Flag_Sequence ${n(t.counts.flags)},
//! RGI_Emoji_Tag_Sequence ${n(t.counts.tags)}, RGI_Emoji_ZWJ_Sequence ${n(t.counts.zwj)}, RGI_Emoji ${n(t.counts.rgi)}.

/// Basic_Emoji of one code point: inclusive ranges.
pub(super) const BASIC: &[(u32, u32)] = &[
${lines(rangeList(t.basicSingle))}
];

/// Basic_Emoji of two code points: these, each followed by U+FE0F.
pub(super) const BASIC_VS16: &[(u32, u32)] = &[
${lines(rangeList(t.basicVs16))}
];

/// Emoji_Keycap_Sequence: each of these followed by U+FE0F U+20E3.
pub(super) const KEYCAP_BASES: &str = ${JSON.stringify(t.keycapBases)};

/// RGI_Emoji_Modifier_Sequence: each of these followed by each skin tone, U+1F3FB..=U+1F3FF.
pub(super) const MODIFIER_BASES: &[(u32, u32)] = &[
${lines(rangeList(t.modifierBases))}
];

/// RGI_Emoji_Flag_Sequence: two regional indicator symbols, here their letters, in pairs.
pub(super) const FLAGS: &str = ${longString(t.flagLetters, " ")};

/// RGI_Emoji_Tag_Sequence: U+1F3F4, these letters as tag characters (U+E0000 plus the
/// letter), U+E007F.
pub(super) const TAGS: &[&str] = &[${t.tagLetters.map((s) => JSON.stringify(s)).join(", ")}];

/// RGI_Emoji_ZWJ_Sequence, as templates separated by \`${M_SEP}\`: \`${M_ZWJ}\` is U+200D (ZWJ), \`${M_VS16}\` U+FE0F,
/// \`${M_TONE}\` each of the five skin tones, \`${M_OTHER_TONE}\` each of the four tones other than the one the
/// \`${M_TONE}\` before it took.
pub(super) const ZWJ_TEMPLATES: &str = ${longString(t.templates, M_SEP)};
`;
}

await main();
