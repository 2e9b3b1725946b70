// Hostile-input check of syncgo's Go yjs-doc merger against Yjs.
//
//   node hostile.mjs [--cases N] [--seed S]
//
// For each case it takes the pushes of a random history (gen.mjs), damages
// one of them (bytes changed, flipped, inserted, removed) and has the Go
// merger (gomerge) merge them. Whenever the Go merger accepts the inputs,
// Yjs must apply the merged value without throwing: a value it throws on
// would be stored and break every client's copy of the row. It exits
// non-zero on such a value. It also counts the damaged inputs that Yjs
// throws on and the Go merger accepts (a value Yjs applies is stored in
// their place, so they break nothing; they are reported, not failed).
import { spawn, execFileSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Y, caseInputs, prng } from './gen.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const cases = Number(opt('--cases', '500'));
const seed0 = Number(opt('--seed', '1'));

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
function goMerge(inputs) {
  const id = nextID++;
  return new Promise((resolve) => {
    pending.set(id, resolve);
    go.stdin.write(`${JSON.stringify({ id, inputs: inputs.map(b64), orders: [[...inputs.keys()]] })}\n`);
  });
}

function damage(R, u) {
  const b = Array.from(u);
  for (let n = 1 + R.int(3); n > 0 && b.length > 0; n--) {
    const p = R.int(b.length);
    switch (R.int(5)) {
      case 0:
        b[p] = R.int(256);
        break;
      case 1:
        b[p] ^= 1 << R.int(8);
        break;
      case 2:
        b.splice(p, 0, R.int(256));
        break;
      case 3:
        b.splice(p, 1);
        break;
      default:
        b.length = p;
    }
  }
  return new Uint8Array(b);
}

/** Applies updates to a fresh Y.Doc and reads every root; an error if Yjs throws. */
function applies(updates) {
  const d = new Y.Doc();
  try {
    for (const u of updates) if (u.length > 0) Y.applyUpdate(d, u);
    d.getText('text').toDelta();
    d.getMap('map').toJSON();
    d.getArray('array').toJSON();
    d.getXmlFragment('xml').toString();
    return null;
  } catch (e) {
    return e;
  } finally {
    d.destroy();
  }
}

const stats = { merges: 0, refused: 0, accepted: 0, lenient: 0, poisoned: 0 };
for (let c = 0; c < cases; c++) {
  const { inputs } = caseInputs(seed0 + c);
  const R = prng((seed0 + c) * 7919);
  for (let t = 0; t < 10; t++) {
    const ins = inputs.slice();
    const j = R.int(ins.length);
    ins[j] = damage(R, ins[j]);
    const a = await goMerge(ins);
    stats.merges++;
    if (a.error) {
      stats.refused++;
      continue;
    }
    stats.accepted++;
    if (applies([ins[j]]) !== null) stats.lenient++;
    const err = applies([new Uint8Array(Buffer.from(a.results[0], 'base64'))]);
    if (err !== null) {
      stats.poisoned++;
      console.log(JSON.stringify({ seed: seed0 + c, try: t, error: String(err).slice(0, 200), damaged: b64(ins[j]) }));
    }
  }
}
console.log(JSON.stringify(stats));
go.stdin.end();
process.exit(stats.poisoned > 0 ? 1 : 0);
