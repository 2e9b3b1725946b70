// The Yjs equivalence check of syncgo's Go yjs-doc merger.
//
//   node check.mjs [--cases N] [--seed S] [--fixtures FILE --fixture-count K] [--bench] [--bench-corpus FILE]
//
// For each case it generates a random concurrent edit history with Yjs
// (gen.mjs), takes the values clients would push, has the Go merger
// (gomerge, package crdt/yjs) fold them in every order (all orders up to
// four inputs, eight random orders beyond), and checks in JavaScript that
// every merged value gives the same document as the reference merger's
// (apply to a fresh Y.Doc, re-encode) — the canonical JSON of the text,
// map, array and XML, and the same state vector and delete set (up to the
// formatting marks the reference's Y.Doc deletes on its own, counted
// apart as formatCleanup; see compareShape). It also
// counts the cases whose Go results are byte-identical across orders and
// idempotent (merging any input again changes no byte).
//
// --fixtures writes the first K cases (inputs and expected document) as
// JSON lines for the Go tests. --bench times Yjs's own merges (the
// reference merger's fold and Y.mergeUpdates) beside Go's on the same
// inputs. --bench-corpus writes the long-document inputs for the Go
// benchmark (crdt/yjs BenchmarkMerge).
import { spawn, execFileSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Y, caseInputs, referenceMerge, docJSON, compareShape, prng } from './gen.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const cases = Number(opt('--cases', '1000'));
const seed0 = Number(opt('--seed', '1'));
const fixtures = opt('--fixtures', null);
const fixtureCount = Number(opt('--fixture-count', '300'));
const bench = args.includes('--bench');
const benchCorpus = opt('--bench-corpus', null);
const verbose = args.includes('--verbose');

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const bin = join(mkdtempSync(join(tmpdir(), 'gomerge-')), 'gomerge');
execFileSync('go', ['build', '-o', bin, './tools/yjs-equivalence/gomerge'], { cwd: root, stdio: 'inherit' });

// The Go merger, one JSON line per request.
const go = spawn(bin, [], { stdio: ['pipe', 'pipe', 'inherit'] });
const pending = new Map();
createInterface({ input: go.stdout }).on('line', (line) => {
  const a = JSON.parse(line);
  pending.get(a.id)(a);
  pending.delete(a.id);
});
let nextID = 0;
const b64 = (u) => Buffer.from(u).toString('base64');
const unb64 = (s) => new Uint8Array(Buffer.from(s ?? '', 'base64'));
function goMerge(inputs, orders, benchRuns = 0) {
  const id = nextID++;
  return new Promise((resolve) => {
    pending.set(id, resolve);
    go.stdin.write(`${JSON.stringify({ id, inputs: inputs.map(b64), orders, bench: benchRuns })}\n`);
  });
}

function permutations(n) {
  if (n === 0) return [[]];
  const out = [];
  for (const p of permutations(n - 1)) for (let i = 0; i <= p.length; i++) out.push([...p.slice(0, i), n - 1, ...p.slice(i)]);
  return out;
}

function ordersFor(n, R) {
  if (n <= 4) return permutations(n);
  const out = [[...Array(n).keys()]];
  while (out.length < 8) {
    const p = [...Array(n).keys()];
    for (let i = n - 1; i > 0; i--) {
      const j = R.int(i + 1);
      [p[i], p[j]] = [p[j], p[i]];
    }
    out.push(p);
  }
  return out;
}

const stats = { cases: 0, orders: 0, docDiff: 0, shapeDiff: 0, formatCleanup: 0, multiDiff: 0, errors: 0, canonical: 0, idempotent: 0, inputBytes: 0 };
const fixtureLines = [];
const t0 = Date.now();
for (let c = 0; c < cases; c++) {
  const seed = seed0 + c;
  const { inputs, R } = caseInputs(seed);
  const orders = ordersFor(inputs.length, R);
  let ref = null;
  for (const u of inputs) ref = referenceMerge(ref, u);
  const want = docJSON(ref);
  const a = await goMerge(inputs, orders);
  stats.cases++;
  stats.inputBytes += inputs.reduce((n, u) => n + u.length, 0);
  if (a.error) {
    stats.errors++;
    console.log(`seed ${seed}: Go error: ${a.error}`);
    continue;
  }
  const results = a.results.map(unb64);
  let same = true;
  for (let k = 0; k < results.length; k++) {
    stats.orders++;
    const got = docJSON(results[k]);
    if (got !== want) {
      stats.docDiff++;
      if (stats.docDiff <= 5 || verbose) console.log(`seed ${seed} order ${orders[k]}: document differs\n  want ${want}\n  got  ${got}`);
    } else {
      const shape = compareShape(ref, results[k]);
      if (shape === 'format-cleanup') stats.formatCleanup++;
      else if (shape !== 'same') {
        stats.shapeDiff++;
        if (stats.shapeDiff <= 5 || verbose) console.log(`seed ${seed} order ${orders[k]}: state vector or delete set differs`);
      }
    }
    if (Buffer.compare(Buffer.from(results[k]), Buffer.from(results[0])) !== 0) same = false;
  }
  if (docJSON(unb64(a.multi)) !== want) {
    stats.multiDiff++;
    console.log(`seed ${seed}: MergeUpdates of all inputs gives another document`);
  }
  if (same) stats.canonical++;
  else if (verbose) console.log(`seed ${seed}: the Go results differ in bytes across orders`);
  if (a.idempotent) stats.idempotent++;
  if (fixtures && fixtureLines.length < fixtureCount && stats.inputBytes < 4e6) {
    const size = inputs.reduce((n, u) => n + u.length, 0);
    if (size < 6000) fixtureLines.push(JSON.stringify({ seed, inputs: inputs.map(b64), doc: JSON.parse(want) }));
  }
  if ((c + 1) % 1000 === 0) console.log(`${c + 1} cases, ${stats.orders} orders, ${stats.docDiff} differences (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
}
console.log(JSON.stringify(stats));
if (fixtures) {
  writeFileSync(fixtures, `${fixtureLines.join('\n')}\n`);
  console.log(`wrote ${fixtureLines.length} fixtures to ${fixtures}`);
}

if (bench) await runBench();
if (benchCorpus) {
  const lines = benchCorpora().slice(1).map(([name, sets]) => JSON.stringify({ name, sets: sets.map((s) => s.map(b64)) }));
  writeFileSync(benchCorpus, `${lines.join('\n')}\n`);
  console.log(`wrote the benchmark corpus to ${benchCorpus}`);
}
go.stdin.end();
const failed = stats.docDiff + stats.shapeDiff + stats.multiDiff + stats.errors > 0;
process.exit(failed ? 1 : 0);

/** The benchmark inputs: sets of values folded by a merger in order. */
function benchCorpora() {
  return [
    ['small edits (2-6 pushes)', Array.from({ length: 200 }, (_, i) => caseInputs(900000 + i).inputs)],
    ['long text (3 clients, 3000 edits): two full states', [longDoc(7, 3000)]],
    ['long text: stored state + a small edit', [longDocWithEdit(8, 3000)]],
  ];
}

/** Yjs's merge speeds beside Go's on the same inputs. */
async function runBench() {
  for (const [name, sets] of benchCorpora()) {
    const bytes = sets.reduce((n, s) => n + s.reduce((m, u) => m + u.length, 0), 0);
    const time = (f, runs) => {
      for (let w = 0; w < 3; w++) for (const s of sets) f(s); // warm the JIT up
      const ts = [];
      for (let r = 0; r < runs; r++) {
        const t = process.hrtime.bigint();
        for (const s of sets) f(s);
        ts.push(Number(process.hrtime.bigint() - t));
      }
      ts.sort((x, y) => x - y);
      return ts[Math.floor(ts.length / 2)];
    };
    const runs = 15;
    const refNs = time((s) => {
      let st = null;
      for (const u of s) st = referenceMerge(st, u);
    }, runs);
    const mergeNs = time((s) => {
      let st = null;
      for (const u of s) st = st === null ? Y.mergeUpdates([u]) : Y.mergeUpdates([st, u]);
    }, runs);
    let goNs = 0;
    for (const s of sets) {
      const a = await goMerge(s, [[...s.keys()]], runs);
      if (a.error) throw new Error(a.error);
      goNs += a.benchNs;
    }
    const mbs = (ns) => ((bytes / 1e6) / (ns / 1e9)).toFixed(1);
    console.log(
      `${name}: ${sets.length} folds, ${bytes} input bytes; median MB/s of input: ` +
        `reference merger (Y.Doc apply + encode) ${mbs(refNs)}, Y.mergeUpdates ${mbs(mergeNs)}, Go ${mbs(goNs)}`,
    );
  }
}

/** A long text typed by several clients, with deletions. */
function longDoc(seed, edits) {
  const R = prng(seed);
  const docs = [new Y.Doc(), new Y.Doc(), new Y.Doc()];
  docs.forEach((d, i) => {
    d.clientID = 1000 + seed * 10 + i; // a reproducible corpus
  });
  for (let e = 0; e < edits; e++) {
    const d = R.pick(docs);
    const t = d.getText('text');
    const s = t.toString();
    if (R.chance(0.8) || s.length < 10) t.insert(R.int(s.length + 1), R.pick(['hello ', 'a', 'xyz', 'é', 'lorem ipsum ']));
    else t.delete(R.int(s.length - 5), 1 + R.int(4));
    if (R.chance(0.05)) {
      const o = R.pick(docs);
      Y.applyUpdate(o, Y.encodeStateAsUpdate(d, Y.encodeStateVector(o)));
    }
  }
  const out = Y.mergeUpdates(docs.map((d) => Y.encodeStateAsUpdate(d)));
  return [out, Y.encodeStateAsUpdate(docs[0])];
}

function longDocWithEdit(seed, edits) {
  const [full] = longDoc(seed, edits);
  const d = new Y.Doc();
  Y.applyUpdate(d, full);
  const sv = Y.encodeStateVector(d);
  d.getText('text').insert(3, 'edit');
  return [referenceMerge(null, full), Y.encodeStateAsUpdate(d, sv)];
}
