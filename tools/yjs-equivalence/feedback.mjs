// Feedback-loop check of syncgo's Go yjs-doc merger against Yjs.
//
//   node feedback.mjs [--cases N] [--seed S] [--steps K]
//
// Several Yjs clients edit one document (text with formatting and embeds,
// maps, arrays, nested types, subdocuments, XML, undo and redo; some with
// garbage collection off) and push as a sync client would (an outbox of
// incremental updates merged, a diff since the last push, or the whole
// state). The server folds every push with the Go merger (gomerge), and
// the clients apply the server's merged value now and then and keep
// editing on top of it, so that the Go merger's own output comes back to
// it. Beside it runs the reference merger (a fresh Y.Doc per merge) over
// the same pushes. Checked after every step:
//
//   - the document of the Go value is the reference value's;
//   - a client that applies the Go value gets the document it would get
//     from the reference value.
//
// A difference only in the formatting of a Y.Text is counted apart
// (formatCleanup: the reference Y.Doc deletes formatting marks it finds
// redundant, and which it deletes depends on the order of the pushes; see
// docs/crdt.md), not failed. It exits non-zero on any other difference
// and on a merge error.
import { spawn, execFileSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Y, prng, referenceMerge } from './gen.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const cases = Number(opt('--cases', '200'));
const seed0 = Number(opt('--seed', '1'));
const fixedSteps = Number(opt('--steps', '0'));

const here = dirname(fileURLToPath(import.meta.url));
const bin = join(mkdtempSync(join(tmpdir(), 'gomerge-')), 'gomerge');
execFileSync('go', ['build', '-o', bin, './tools/yjs-equivalence/gomerge'], { cwd: join(here, '..', '..'), stdio: 'inherit' });
const go = spawn(bin, [], { stdio: ['pipe', 'pipe', 'inherit'] });
const pending = new Map();
createInterface({ input: go.stdout }).on('line', (line) => {
  const a = JSON.parse(line);
  pending.get(a.id)(a);
  pending.delete(a.id);
});
let nextID = 0;
const b64 = (u) => Buffer.from(u).toString('base64');
function goMerge(stored, incoming) {
  const id = nextID++;
  const inputs = stored ? [stored, incoming] : [incoming];
  return new Promise((resolve) => {
    pending.set(id, (a) => resolve(a.error ? { error: a.error } : { out: new Uint8Array(Buffer.from(a.results[0], 'base64')) }));
    go.stdin.write(`${JSON.stringify({ id, inputs: inputs.map(b64), orders: [[...inputs.keys()]] })}\n`);
  });
}

const ALPHA = ['a', 'b', 'q', ' ', 'é', '中', '😀', '\n', '\u{1F468}\u200D\u{1F469}'];
const str = (R, n = 5) => {
  let s = '';
  for (let i = 1 + R.int(n); i > 0; i--) s += R.pick(ALPHA);
  return s;
};
const val = (R) => R.pick([1, -7, 2.5, 'str', true, null, { a: [1, { b: 'c' }] }, [1, 2], new Uint8Array([1, 2, 3]), 2 ** 40]);
const ROOTS = ['t', 'u'];

/** The shared types a client can edit, in an order that depends only on the document. */
function types(doc) {
  const out = { text: ROOTS.map((r) => doc.getText(r)), map: [doc.getMap('m')], array: [doc.getArray('a')], xml: [doc.getXmlFragment('x')] };
  const visit = (v, d) => {
    if (d > 5) return;
    if (v instanceof Y.XmlElement) {
      out.xml.push(v);
      v.toArray().forEach((x) => visit(x, d + 1));
    } else if (v instanceof Y.Text) out.text.push(v);
    else if (v instanceof Y.Map) {
      out.map.push(v);
      for (const k of [...v.keys()].sort()) visit(v.get(k), d + 1);
    } else if (v instanceof Y.Array) {
      out.array.push(v);
      v.toArray().forEach((x) => visit(x, d + 1));
    }
  };
  for (const k of [...doc.getMap('m').keys()].sort()) visit(doc.getMap('m').get(k), 1);
  doc.getArray('a').toArray().forEach((x) => visit(x, 1));
  doc.getXmlFragment('x').toArray().forEach((x) => visit(x, 1));
  return out;
}
function nested(R) {
  switch (R.int(4)) {
    case 0:
      return new Y.Text(str(R));
    case 1: {
      const m = new Y.Map();
      m.set('z', val(R));
      return m;
    }
    case 2: {
      const a = new Y.Array();
      a.insert(0, [val(R), val(R)]);
      return a;
    }
    default:
      return new Y.Doc({ guid: `sub${R.int(5)}`, meta: { k: R.int(3) } });
  }
}
/** A Y.Text as a string whose UTF-16 indexes are its indexes (an embed is one unit). */
const units = (t) => t.toDelta().map((op) => (typeof op.insert === 'string' ? op.insert : '\u0000')).join('');
function snap(s, i) {
  if (i > 0 && i < s.length) {
    const c = s.charCodeAt(i - 1);
    if (c >= 0xd800 && c <= 0xdbff) return i - 1;
  }
  return i;
}
const ATTRS = [{ bold: true }, { bold: null }, { i: 1 }, { c: 'r' }, { c: null }];
function edit(R, doc) {
  const ty = types(doc);
  const kind = R.pick(['text', 'text', 'map', 'array', 'xml']);
  if (kind === 'text') {
    const t = R.pick(ty.text);
    const s = units(t);
    const k = R.int(10);
    if (k < 5 || s.length === 0) t.insert(snap(s, R.int(s.length + 1)), str(R, R.chance(0.05) ? 200 : 5), R.chance(0.2) ? R.pick(ATTRS) : undefined);
    else if (k < 9) {
      const i = snap(s, R.int(s.length));
      const j = snap(s, Math.min(s.length, i + 1 + R.int(10)));
      if (j > i) {
        if (k < 8) t.delete(i, j - i);
        else t.format(i, j - i, R.pick(ATTRS));
      }
    } else t.insertEmbed(snap(s, R.int(s.length + 1)), { img: str(R, 2) }, R.chance(0.5) ? { w: 3 } : undefined);
  } else if (kind === 'map') {
    const m = R.pick(ty.map);
    const k = R.int(8);
    if (k < 2 && m.size > 0) m.delete(R.pick([...m.keys()].sort()));
    else if (k < 4) m.set(R.pick(['a', 'b', 'c']), nested(R));
    else m.set(R.pick(['a', 'b', 'c', 'd']), val(R));
  } else if (kind === 'array') {
    const a = R.pick(ty.array);
    if (R.chance(0.35) && a.length > 0) {
      const i = R.int(a.length);
      a.delete(i, Math.min(a.length - i, 1 + R.int(4)));
    } else {
      const els = [];
      for (let i = 1 + R.int(R.chance(0.1) ? 30 : 3); i > 0; i--) els.push(R.chance(0.25) ? nested(R) : val(R));
      a.insert(R.int(a.length + 1), els);
    }
  } else {
    const x = R.pick(ty.xml);
    if (x instanceof Y.XmlElement && R.chance(0.3)) {
      if (R.chance(0.7)) x.setAttribute(R.pick(['id', 'cls']), str(R, 2));
      else x.removeAttribute('id');
    } else if (x.length > 0 && R.chance(0.3)) x.delete(R.int(x.length), 1);
    else x.insert(R.int(x.length + 1), [R.chance(0.5) ? new Y.XmlElement(R.pick(['p', 'b'])) : new Y.XmlText(str(R))]);
  }
}

/** The canonical JSON of a value; without formatting, text attributes are left out. */
function canon(v, formatting) {
  if (v === undefined) return '$undefined';
  if (v === null || typeof v !== 'object') return typeof v === 'number' && Object.is(v, -0) ? 0 : v;
  if (v instanceof Uint8Array) return { $bytes: [...v] };
  if (v instanceof Y.Doc) return { $doc: v.guid, meta: v.meta };
  if (v instanceof Y.XmlElement || v instanceof Y.XmlFragment) {
    const attrs = v instanceof Y.XmlElement ? v.getAttributes() : {};
    return { $xml: v.nodeName ?? 'fragment', attrs: canon(attrs, formatting), children: v.toArray().map((c) => canon(c, formatting)) };
  }
  if (v instanceof Y.Text) {
    // Y.XmlText too (a Y.Text).
    const out = [];
    for (const op of v.toDelta()) {
      const c = { insert: canon(op.insert, formatting), attributes: formatting && op.attributes && Object.keys(op.attributes).length ? canon(op.attributes, formatting) : null };
      const last = out[out.length - 1];
      if (last && typeof last.insert === 'string' && typeof c.insert === 'string' && JSON.stringify(last.attributes) === JSON.stringify(c.attributes)) last.insert += c.insert;
      else out.push(c);
    }
    return { [v instanceof Y.XmlText ? '$xmltext' : '$text']: out };
  }
  if (v instanceof Y.Map) {
    const o = {};
    for (const k of [...v.keys()].sort()) o[k] = canon(v.get(k), formatting);
    return { $map: o };
  }
  if (v instanceof Y.Array) return { $array: v.toArray().map((x) => canon(x, formatting)) };
  if (Array.isArray(v)) return v.map((x) => canon(x, formatting));
  const o = {};
  for (const k of Object.keys(v).sort()) o[k] = canon(v[k], formatting);
  return o;
}
function docOf(updates, formatting) {
  const d = new Y.Doc();
  try {
    for (const u of updates) if (u && u.length > 0) Y.applyUpdate(d, u);
    const o = { m: canon(d.getMap('m'), formatting), a: canon(d.getArray('a'), formatting), x: canon(d.getXmlFragment('x'), formatting) };
    for (const r of ROOTS) o[r] = canon(d.getText(r), formatting);
    o.sv = [...Y.decodeStateVector(Y.encodeStateVector(d)).entries()].sort((p, q) => p[0] - q[0]);
    return JSON.stringify(o);
  } finally {
    d.destroy();
  }
}
/** 'same', 'format' (the documents differ only in text formatting) or 'different'. */
function compare(a, b) {
  if (docOf(a, true) === docOf(b, true)) return 'same';
  return docOf(a, false) === docOf(b, false) ? 'format' : 'different';
}

const stats = { cases: 0, pushes: 0, applies: 0, formatCleanup: 0, different: 0, errors: 0 };
async function runCase(seed) {
  const R = prng(seed);
  const clients = [];
  for (let i = 2 + R.int(4); i > 0; i--) {
    const d = new Y.Doc({ gc: !R.chance(0.3) });
    d.clientID = R.chance(0.5) ? clients.length + 1 : 1 + R.int(2 ** 32 - 2);
    const c = { d, outbox: [], sv: null, um: null };
    d.on('update', (u, origin) => {
      if (origin !== 'server') c.outbox.push(u);
    });
    if (R.chance(0.4)) c.um = new Y.UndoManager([d.getText('t'), d.getMap('m'), d.getArray('a')], { captureTimeout: 0 });
    clients.push(c);
  }
  let goStored = null;
  let refStored = null;
  const report = (what, step, a, b) => {
    const kind = compare(a, b);
    if (kind === 'format') stats.formatCleanup++;
    if (kind !== 'different') return false;
    stats.different++;
    console.log(JSON.stringify({ seed, step, what, go: docOf(a, true).slice(0, 1500), ref: docOf(b, true).slice(0, 1500) }));
    return true;
  };
  const steps = fixedSteps || 10 + R.int(60);
  for (let s = 0; s < steps; s++) {
    const c = R.pick(clients);
    const r = R.next();
    if (r < 0.25) {
      const k = R.int(3);
      let bytes;
      if (k === 1 && c.sv) bytes = Y.encodeStateAsUpdate(c.d, c.sv);
      else if (k === 2 && c.outbox.length > 0) bytes = Y.mergeUpdates(c.outbox);
      else bytes = Y.encodeStateAsUpdate(c.d);
      c.outbox = [];
      c.sv = Y.encodeStateVector(c.d);
      const res = await goMerge(goStored, bytes);
      if (res.error) {
        stats.errors++;
        console.log(JSON.stringify({ seed, step: s, error: res.error, stored: b64(goStored ?? new Uint8Array()), pushed: b64(bytes) }));
        return;
      }
      goStored = res.out;
      refStored = referenceMerge(refStored, bytes);
      stats.pushes++;
      if (report('merged value', s, [goStored], [refStored])) return;
    } else if (r < 0.4) {
      if (!goStored) continue;
      const before = Y.encodeStateAsUpdate(c.d);
      stats.applies++;
      if (report('a client applying it', s, [before, goStored], [before, refStored])) return;
      Y.applyUpdate(c.d, goStored, 'server');
    } else if (r < 0.47 && c.um) {
      if (R.chance(0.6)) c.um.undo();
      else c.um.redo();
    } else {
      const n = R.chance(0.3) ? 2 + R.int(3) : 1;
      c.d.transact(() => {
        for (let k = 0; k < n; k++) edit(R, c.d);
      });
    }
  }
}

for (let c = 0; c < cases; c++) {
  stats.cases++;
  await runCase(seed0 + c);
  if (stats.different + stats.errors > 3) break;
}
console.log(JSON.stringify(stats));
go.stdin.end();
process.exit(stats.different + stats.errors > 0 ? 1 : 0);
