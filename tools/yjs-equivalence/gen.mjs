// Random concurrent edit histories with Yjs, and the canonical form of a
// document that the equivalence check compares.
import * as Y from 'yjs';

/** A small seeded generator (mulberry32). */
export function prng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n) => Math.floor(next() * n);
  return { next, int, pick: (xs) => xs[int(xs.length)], chance: (p) => next() < p };
}

const ALPHABET = ['a', 'b', 'c', 'x', 'y', ' ', 'é', 'ß', '中', '😀', '🎉', '\n', 'Ω', '\u0301'];

function randString(R, max = 6) {
  let s = '';
  const n = 1 + R.int(max);
  for (let i = 0; i < n; i++) s += R.pick(ALPHABET);
  return s;
}

function randValue(R, depth = 0) {
  switch (R.int(depth > 1 ? 5 : 13)) {
    case 0:
      return R.int(2000) - 1000;
    case 1:
      return (R.next() - 0.5) * 1e6;
    case 2:
      return randString(R);
    case 3:
      return R.chance(0.5);
    case 4:
      return null;
    case 5: {
      const a = [];
      for (let i = R.int(4); i > 0; i--) a.push(randValue(R, depth + 1));
      return a;
    }
    case 6: {
      const o = {};
      for (let i = R.int(4); i > 0; i--) o[randString(R, 3)] = randValue(R, depth + 1);
      return o;
    }
    case 7:
      return Uint8Array.from({ length: R.int(5) }, () => R.int(256));
    case 8:
      return BigInt(R.int(1e9)) * 1000003n - 5n;
    case 9:
      return 0.5 + R.int(100) / 4; // a float32
    case 10:
      return 2 ** 33 + R.int(1000); // an integer past 31 bits
    case 11:
      return undefined;
    default:
      return -0.1 * R.int(10);
  }
}

/** Snap a UTF-16 index to a code point boundary of s. */
function snap(s, i) {
  if (i > 0 && i < s.length) {
    const c = s.charCodeAt(i - 1);
    if (c >= 0xd800 && c <= 0xdbff) return i - 1;
  }
  return i;
}

/** The shared types reachable in a doc (roots and nested), by kind. */
function reachable(doc) {
  const out = { text: [doc.getText('text')], map: [doc.getMap('map')], array: [doc.getArray('array')] };
  const visit = (v, depth) => {
    if (depth > 4) return;
    if (v instanceof Y.Text) out.text.push(v);
    else if (v instanceof Y.Map) {
      out.map.push(v);
      for (const x of v.values()) visit(x, depth + 1);
    } else if (v instanceof Y.Array) {
      out.array.push(v);
      for (const x of v.toArray()) visit(x, depth + 1);
    }
  };
  for (const x of doc.getMap('map').values()) visit(x, 1);
  for (const x of doc.getArray('array').toArray()) visit(x, 1);
  return out;
}

function nestedType(R) {
  switch (R.int(3)) {
    case 0:
      return new Y.Text(R.chance(0.5) ? randString(R) : '');
    case 1: {
      const m = new Y.Map();
      if (R.chance(0.5)) m.set('k', randValue(R, 2));
      return m;
    }
    default: {
      const a = new Y.Array();
      if (R.chance(0.5)) a.push([randValue(R, 2)]);
      return a;
    }
  }
}

function arrayElement(R) {
  const k = R.int(20);
  if (k < 2) return nestedType(R);
  if (k === 2) return Uint8Array.from({ length: 1 + R.int(4) }, () => R.int(256));
  if (k === 3 && R.chance(0.2)) return new Y.Doc();
  // A list takes no undefined or bigint at the top (ContentAny inside
  // objects and arrays does).
  for (;;) {
    const v = randValue(R, 1);
    if (v !== undefined && typeof v !== 'bigint') return v;
  }
}

const ATTRS = [{ bold: true }, { bold: null }, { italic: true }, { color: '#f00' }, { color: null }, { link: { href: 'x' } }];

/** The text as one string whose UTF-16 indexes are Y.Text indexes (an
 * embed counts one unit). */
function textUnits(t) {
  let s = '';
  for (const op of t.toDelta()) s += typeof op.insert === 'string' ? op.insert : '\u0000';
  return s;
}

function textOp(R, t) {
  const s = textUnits(t);
  const k = R.int(10);
  if (k < 5 || s.length === 0) {
    const i = snap(s, R.int(s.length + 1));
    if (R.chance(0.15)) t.insert(i, randString(R), R.pick(ATTRS));
    else t.insert(i, randString(R, R.chance(0.1) ? 40 : 6));
  } else if (k < 8) {
    const i = snap(s, R.int(s.length));
    const j = snap(s, Math.min(s.length, i + 1 + R.int(8)));
    if (j > i) t.delete(i, j - i);
  } else if (k < 9) {
    const i = snap(s, R.int(s.length));
    const j = snap(s, Math.min(s.length, i + 1 + R.int(6)));
    if (j > i) t.format(i, j - i, R.pick(ATTRS));
  } else {
    t.insertEmbed(snap(s, R.int(s.length + 1)), { image: randString(R, 3) });
  }
}

function mapOp(R, m) {
  const keys = ['a', 'b', 'c', 'd', 'e', 'f'];
  const k = R.int(10);
  if (k < 2 && m.size > 0) m.delete(R.pick([...m.keys()]));
  else if (k < 3) m.set(R.pick(keys), nestedType(R));
  else if (k < 4) m.set(R.pick(keys), Uint8Array.from({ length: R.int(6) }, () => R.int(256)));
  else if (k === 4 && R.chance(0.1)) m.set(R.pick(keys), new Y.Doc());
  else m.set(R.pick(keys), randValue(R));
}

function arrayOp(R, a) {
  const k = R.int(10);
  if (k < 3 && a.length > 0) {
    const i = R.int(a.length);
    a.delete(i, Math.min(a.length - i, 1 + R.int(3)));
  } else {
    const n = 1 + R.int(R.chance(0.1) ? 12 : 3);
    const els = [];
    for (let i = 0; i < n; i++) els.push(arrayElement(R));
    if (R.chance(0.3)) a.push(els);
    else a.insert(R.int(a.length + 1), els);
  }
}

function xmlOp(R, doc) {
  const frag = doc.getXmlFragment('xml');
  if (frag.length > 0 && R.chance(0.3)) {
    const n = frag.get(R.int(frag.length));
    if (n instanceof Y.XmlElement) {
      if (R.chance(0.5)) n.setAttribute(R.pick(['class', 'id']), randString(R, 3));
      else n.insert(0, [new Y.XmlText(randString(R))]);
    } else if (n instanceof Y.XmlText) n.insert(0, randString(R));
    return;
  }
  if (frag.length > 0 && R.chance(0.2)) {
    frag.delete(R.int(frag.length), 1);
    return;
  }
  const el = R.chance(0.6) ? new Y.XmlElement(R.pick(['p', 'h1', 'li'])) : new Y.XmlText(randString(R));
  if (el instanceof Y.XmlElement && R.chance(0.5)) el.insert(0, [new Y.XmlText(randString(R))]);
  frag.insert(R.int(frag.length + 1), [el]);
}

function randomEdit(R, doc, kinds) {
  const types = reachable(doc);
  const kind = R.pick(kinds);
  if (kind === 'xml') return xmlOp(R, doc);
  if (kind === 'text') return textOp(R, R.pick(types.text));
  if (kind === 'map') return mapOp(R, R.pick(types.map));
  return arrayOp(R, R.pick(types.array));
}

/**
 * A random history: several clients edit concurrently and sync now and
 * then; at random moments a client pushes bytes as a sync client would
 * (an outbox of incremental updates merged, a diff since its last push, or
 * its whole state). Returns the pushes.
 */
export function genHistory(seed, opts = {}) {
  const R = prng(seed);
  const nClients = opts.clients ?? 2 + R.int(6);
  const steps = opts.steps ?? 4 + R.int(36);
  const kinds = R.pick([['text'], ['map'], ['array'], ['text', 'map', 'array'], ['text', 'map', 'array', 'xml']]);
  const docs = [];
  const outbox = [];
  const lastSV = [];
  for (let i = 0; i < nClients; i++) {
    const d = new Y.Doc();
    // Small ids make the client order of YATA conflicts matter often.
    d.clientID = R.chance(0.5) ? 1 + R.int(8) * 10 + i : 1 + R.int(0xfffffffe);
    if (docs.some((x) => x.clientID === d.clientID)) d.clientID += 100000 + i;
    docs.push(d);
    outbox.push([]);
    lastSV.push(null);
    d.on('update', (u, origin) => {
      if (origin !== 'sync') outbox[i].push(u);
    });
  }
  const pushes = [];
  const push = (i) => {
    const d = docs[i];
    const k = R.int(4);
    let bytes;
    if (k === 0) bytes = Y.encodeStateAsUpdate(d);
    else if (k === 1 && lastSV[i] !== null) bytes = Y.encodeStateAsUpdate(d, lastSV[i]);
    else if (outbox[i].length > 0) bytes = Y.mergeUpdates(outbox[i]);
    else bytes = Y.encodeStateAsUpdate(d);
    outbox[i] = [];
    lastSV[i] = Y.encodeStateVector(d);
    pushes.push(bytes);
  };
  for (let s = 0; s < steps; s++) {
    const i = R.int(nClients);
    const d = docs[i];
    const r = R.next();
    if (r < 0.15 && nClients > 1) {
      const j = (i + 1 + R.int(nClients - 1)) % nClients;
      Y.applyUpdate(docs[j], Y.encodeStateAsUpdate(d, Y.encodeStateVector(docs[j])), 'sync');
    } else if (r < 0.3) {
      push(i);
    } else {
      const n = R.chance(0.3) ? 2 + R.int(4) : 1;
      d.transact(() => {
        for (let k = 0; k < n; k++) randomEdit(R, d, kinds);
      });
    }
  }
  for (let i = 0; i < nClients; i++) if (outbox[i].length > 0 || R.chance(0.3)) push(i);
  for (const d of docs) d.destroy();
  return { pushes, R };
}

/** The inputs of a case: some of the history's pushes, and sometimes a
 * value the reference merger stored (GC and ContentDeleted structs). */
export function caseInputs(seed) {
  const { pushes, R } = genHistory(seed);
  let inputs = pushes;
  if (inputs.length > 6) {
    // Keep every push most of the time (a complete history); sometimes a
    // random subset (missing dependencies, pending structs, Skips).
    if (R.chance(0.3)) inputs = inputs.filter(() => R.chance(0.6));
    if (inputs.length > 6) {
      // Fold the surplus with the reference merger into one stored value.
      let stored = null;
      for (const u of inputs.slice(0, inputs.length - 5)) stored = referenceMerge(stored, u);
      inputs = [stored, ...inputs.slice(inputs.length - 5)];
    }
  }
  if (inputs.length === 0) inputs = [new Uint8Array([0, 0])];
  return { inputs, R };
}

/** The reference merger: both values applied to a fresh Y.Doc, re-encoded. */
export function referenceMerge(stored, incoming) {
  const doc = new Y.Doc();
  try {
    if (stored !== null && stored.length > 0) Y.applyUpdate(doc, stored);
    if (incoming.length > 0) Y.applyUpdate(doc, incoming);
    return Y.encodeStateAsUpdate(doc);
  } finally {
    doc.destroy();
  }
}

const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');

/** The canonical, JSON-comparable form of a value of a document. */
export function canon(v) {
  if (v === undefined) return { $undefined: true };
  if (v === null || typeof v === 'boolean' || typeof v === 'string') return v;
  if (typeof v === 'number') return Number.isFinite(v) ? (Object.is(v, -0) ? 0 : v) : null;
  if (typeof v === 'bigint') return { $bigint: v.toString() };
  if (v instanceof Uint8Array) return { $bytes: hex(v) };
  if (v instanceof Y.Doc) return { $doc: v.guid };
  if (v instanceof Y.XmlElement || v instanceof Y.XmlText || v instanceof Y.XmlFragment) return { $xml: v.toString() };
  if (v instanceof Y.Text) return { $text: canonDelta(v.toDelta()) };
  if (v instanceof Y.Map) {
    const o = {};
    for (const k of [...v.keys()].sort()) o[k] = canon(v.get(k));
    return { $map: o };
  }
  if (v instanceof Y.Array) return { $array: v.toArray().map(canon) };
  if (Array.isArray(v)) return v.map(canon);
  if (typeof v === 'object') {
    const o = {};
    for (const k of Object.keys(v).sort()) o[k] = canon(v[k]);
    return o;
  }
  throw new Error(`unexpected value ${typeof v}`);
}

/** A text delta with adjacent string runs of equal attributes joined. */
function canonDelta(delta) {
  const out = [];
  for (const op of delta) {
    const c = { insert: canon(op.insert) };
    if (op.attributes && Object.keys(op.attributes).length > 0) c.attributes = canon(op.attributes);
    const last = out[out.length - 1];
    if (
      last &&
      typeof last.insert === 'string' &&
      typeof c.insert === 'string' &&
      JSON.stringify(last.attributes ?? null) === JSON.stringify(c.attributes ?? null)
    ) {
      last.insert += c.insert;
    } else out.push(c);
  }
  return out;
}

/** The canonical JSON of the document an update gives. */
export function docJSON(update) {
  const doc = new Y.Doc();
  try {
    if (update.length > 0) Y.applyUpdate(doc, update);
    return JSON.stringify({
      text: canon(doc.getText('text')),
      map: canon(doc.getMap('map')),
      array: canon(doc.getArray('array')),
      xml: canon(doc.getXmlFragment('xml')),
    });
  } finally {
    doc.destroy();
  }
}

/**
 * Compares the structure of the documents two updates give: 'same' when
 * the state vectors and delete sets are equal; 'format-cleanup' when they
 * differ only by formatting marks the first document deleted on its own
 * (a Y.Doc that integrates remote formatting deletes the marks it finds
 * redundant, cleanupYTextFormatting, so the reference merger's fold adds
 * such deletions, depending on the order it saw the pushes); 'different'
 * otherwise.
 */
export function compareShape(refUpdate, update) {
  const a = new Y.Doc();
  const b = new Y.Doc();
  try {
    Y.applyUpdate(a, refUpdate);
    Y.applyUpdate(b, update);
    const sa = Y.snapshot(a);
    const sb = Y.snapshot(b);
    if (Y.equalSnapshots(sa, sb)) return 'same';
    if (JSON.stringify([...sa.sv].sort()) !== JSON.stringify([...sb.sv].sort())) return 'different';
    const deleted = (s) => {
      const out = new Set();
      for (const [client, items] of s.ds.clients) for (const d of items) for (let c = d.clock; c < d.clock + d.len; c++) out.add(`${client}:${c}`);
      return out;
    };
    const da = deleted(sa);
    const db = deleted(sb);
    for (const x of db) if (!da.has(x)) return 'different';
    for (const x of da) {
      if (db.has(x)) continue;
      const [client, clock] = x.split(':').map(Number);
      const item = (b.store.clients.get(client) ?? []).find((s) => s.id.clock <= clock && clock < s.id.clock + s.length);
      if (!item || !(item.content instanceof Y.ContentFormat)) return 'different';
    }
    return 'format-cleanup';
  } finally {
    a.destroy();
    b.destroy();
  }
}

export { Y };
