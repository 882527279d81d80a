// explainer_kernel.js -- the page's second part, "How a fast kernel computes
// it": the walk's head computed the ways fast programs compute attention
// (tiles, the online softmax, causal blocks, the KV cache, split-KV decode,
// pages, ring attention, the gradient). Every number comes from the library:
// web_kernel (the JSON of `attn explain --kernel --json`) and web_kernel_cost
// (the slider of the first step). It is played like the walk: each step is a
// section whose figure's cells the scroll fills in order (defineStep, mount
// and setFill of explainer.js, which this file follows in the page).

const kstate = { block: 2, workers: 2, ranks: 3, logT: 12 };
let kernelCache = { key: null, data: null };

// The library's walk for the walk's sentence and these controls, in two
// parts: computing it (web_kernel_run) and reading its JSON (web_kernel_json).
// At 64 words each takes tens of milliseconds, too long together for one
// task, so scheduleSteps runs each as a job of its own before the steps that
// draw it (kernelJobs); kernelData finds them done, or does what is left.
const kernelInputs = (c) => JSON.stringify([c.r.tokens.join(' '), kstate.block, kstate.workers, kstate.ranks]);
function kernelRun(c) {
  const key = kernelInputs(c);
  if (kernelCache.key === key) return;
  kernelCache = { key: null, data: null };
  const r = withC([c.r.tokens.join(' ')], (p) => lib.web_kernel_run(p, kstate.block, kstate.workers, kstate.ranks));
  if (r.error) throw new Error(r.error);
  kernelCache.key = key;
}
function kernelParse() {
  if (kernelCache.data) return;
  const k = withC([], () => lib.web_kernel_json());
  if (k.error) throw new Error(k.error);
  kernelCache.data = k;
  window.attnKernel = k; // for the tests and the curious: the library's own JSON
}
function kernelData(c) {
  kernelRun(c);
  kernelParse();
  return kernelCache.data;
}
// kernelData's two parts as jobs (each runs alone in its task while it has work;
// see runJobs). A failure is the step's to report: its render calls kernelData,
// which meets it again and throws it there. They work on the controls as they
// are when they run, so the same two serve every change: queued once, before
// the first step of this part that waits for them.
const kernelWalked = () => kernelCache.key === kernelInputs(ctx());
const KERNEL_JOBS = [
  Object.assign(() => { try { if (!kernelWalked()) kernelRun(ctx()); } catch (e) { /* thrown again by the render */ } },
    { alone: () => !kernelWalked() }),
  Object.assign(() => { try { if (kernelWalked()) kernelParse(); } catch (e) { /* thrown again by the render */ } },
    { alone: () => kernelWalked() && !kernelCache.data }),
];
const kernelJobs = () => KERNEL_JOBS;
// A step of this part: it draws from the walk, whose jobs go before it.
const defineKernelStep = (id, def) => defineStep(id, { prepare: kernelJobs, ...def });
const kernelKey = (c, ...more) => JSON.stringify([c.r.tokens, kstate.block, ...more]);

function kernelCost(T) { return withC([], () => lib.web_kernel_cost(T)); }

function bytesText(b) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let u = 0;
  while (b >= 1024 && u < 4) { b /= 1024; u++; }
  return u ? `${b.toFixed(1)} ${units[u]}` : `${b.toFixed(0)} B`;
}

// How a cell the scroll fills starts: empty, or full under reduced motion.
const fillClass = () => (reducedMotion.matches ? '' : ' empty');
const fillAttr = () => ` data-filled="${reducedMotion.matches ? 1 : 0}"`;

// One numeric cell drawn as the heatmaps draw theirs (colour from the figure's one scale).
function numCell(x, y, w, h, value, range, i, j, text = fmt(value)) {
  const c = value === null ? { fill: 'var(--panel)', ink: 'var(--ink)' } : shade(value / range);
  return `<g class="cell${fillClass()}" data-i="${i}" data-j="${j}"${fillAttr()}>` +
    `<rect class="cell-bg" x="${x}" y="${y}" width="${w}" height="${h}" fill="${c.fill}"/>` +
    `<text x="${x + w - 4}" y="${y + h - 5}" text-anchor="end" fill="${c.ink}">${esc(text)}</text></g>`;
}

// A table whose numbers are cells: head (column titles), rows of [label, values...];
// every number is a cell, filled row by row. opts: range, widths, note(i) (text after the row).
function kTable(title, head, rows, opts = {}) {
  const cw = opts.cw || 54, ch = CH, lw = 10 + 7.2 * Math.max(...rows.map((r) => String(r[0]).length), String(head[0]).length);
  const cols = head.length - 1, top = 40, noteW = opts.noteW || 0;
  const width = Math.ceil(lw + cols * cw + noteW + 8), height = top + rows.length * ch + 6;
  const range = opts.range || rangeOf(rows.map((r) => r.slice(1).filter((x) => typeof x === 'number')));
  const out = [`<svg class="heatmap kfig" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="group" aria-label="${esc(title)}">`,
    `<text class="title" x="2" y="14">${esc(title)}</text>`,
    `<text class="label" x="${lw - 6}" y="${top - 6}" text-anchor="end">${esc(head[0])}</text>`];
  head.slice(1).forEach((h, j) => out.push(`<text class="label" x="${lw + j * cw + cw - 4}" y="${top - 6}" text-anchor="end">${esc(h)}</text>`));
  rows.forEach((r, i) => {
    const y = top + i * ch;
    out.push(`<text class="label row-label" x="${lw - 6}" y="${y + ch - 5}" text-anchor="end">${esc(r[0])}</text>`);
    r.slice(1).forEach((v, j) => {
      if (typeof v === 'number' || v === null) out.push(numCell(lw + j * cw, y, cw, ch, v, range, i, j));
      else out.push(`<text class="label" x="${lw + j * cw + cw - 4}" y="${y + ch - 5}" text-anchor="end">${esc(v)}</text>`);
    });
    if (opts.note) out.push(`<text class="label" x="${lw + cols * cw + 6}" y="${y + ch - 5}">${esc(opts.note(i))}</text>`);
  });
  out.push('</svg>');
  return out.join('');
}

// The walk's controls that make its numbers differ from this part's (the wired
// head, no positions, scores ÷ √d_k, no mask, self-attention): while any is
// set, the part says so, and does not call its numbers the walk's.
function walkDifferences() {
  const out = [];
  if (state.head !== 'wired') out.push(`the ${state.head} head`);
  if (state.tied) out.push('one matrix for questions and answers');
  if (state.positions === 'rope') out.push('RoPE');
  if (state.positions === 'sinusoidal') out.push('sinusoidal positions');
  if (state.noScale) out.push('scores not divided by √d_k');
  if (state.scaleByModel) out.push('scores divided by √d_model');
  if (state.causal) out.push('the causal mask');
  if (state.source) out.push('keys from another sentence');
  return out;
}
function kernelBesideWalk() {
  const diff = walkDifferences();
  const list = diff.length > 1 ? `${diff.slice(0, -1).join(', ')} and ${diff[diff.length - 1]}` : diff[0];
  document.getElementById('kernel-walk-note').textContent = diff.length
    ? `The walk above now has ${list}. This part keeps the head the walk starts with, so its numbers are those the walk shows with its controls as they first were.`
    : '';
  document.getElementById('ktiles-walk').textContent = diff.length
    ? 'Put side by side, they are exactly the scaled scores the walk shows with its controls as they first were.'
    : 'Put side by side, they are exactly the scaled scores of the walk.';
}

// "1 rank", "3 ranks"; and, when the control asked for more parts than the
// sentence has words (the library gives each part one word at least), why fewer.
const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;
const fewerParts = (got, asked, n, what) => (got < asked ? ` (${plural(asked, what)} asked; the sentence has ${plural(n, 'word')})` : '');

const figCells = (id) => () => [...document.querySelectorAll(`#step-${id} .step-figure .cell`)];
const maxDiff = (a, b) => Math.max(...a.flat().map((x, i) => Math.abs(x - b.flat()[i])));
const sci = (x) => x.toExponential(1);
const rowWords = (t, a, b) => t.slice(a, b).join(' ');

// ---- 1. the cost ---------------------------------------------------------------------------

defineKernelStep('kcost', {
  key: () => `cost ${kstate.logT}`, // the same for every sentence: it depends on T only
  collect: figCells('kcost'),
  render() {
    const k = kernelData(ctx()).cost;
    const W = PHONE ? 350 : 540, lw = 78, barH = 13, rowH = 36, top = 34;
    const lo = Math.log2(1024), hi = Math.log2(64 * 1024 ** 3); // 1 KiB to 64 GiB: each tick 32 times the last
    const x = (b) => lw + (W - lw - 12) * (Math.log2(Math.max(b, 1024)) - lo) / (hi - lo);
    const out = [`<svg class="heatmap kfig" width="${W}" height="${top + (k.T.length + 1) * rowH + 30}" role="group" aria-label="bytes of the score matrix and of the kernel's workspace, one axis">`,
      `<text class="title" x="2" y="14">bytes: T × T scores (red), the workspace (grey)</text>`];
    for (let e = 10; e <= 35; e += 5) {
      const xx = x(2 ** e);
      out.push(`<line class="axis" x1="${xx}" x2="${xx}" y1="${top - 8}" y2="${top + (k.T.length + 1) * rowH}" stroke-dasharray="2 3"/>`,
        `<text class="muted-text" x="${xx}" y="${top + (k.T.length + 1) * rowH + 14}" text-anchor="middle">${bytesText(2 ** e).replace('.0', '')}</text>`);
    }
    const bar = (b, y, cls, i, j, label) => `<g class="cell${fillClass()}" data-i="${i}" data-j="${j}"${fillAttr()}>` +
      `<rect class="${cls}" x="${lw}" y="${y}" width="${Math.max(2, x(b) - lw)}" height="${barH}"/>` +
      `<text class="bar-label" x="${Math.min(x(b) + 4, W - 70)}" y="${y + barH - 2}">${esc(label)}</text></g>`;
    k.T.forEach((T, i) => {
      const y = top + i * rowH;
      out.push(`<text class="label" x="${lw - 6}" y="${y + barH + 4}" text-anchor="end">T ${T}</text>`,
        bar(k.score_bytes[i], y, 'bar-scores', i, 0, bytesText(k.score_bytes[i])),
        bar(k.workspace_bytes[i], y + barH + 2, 'bar-kept', i, 1, bytesText(k.workspace_bytes[i])));
    });
    // The slider's T, measured now by the library.
    const T = 2 ** kstate.logT, m = kernelCost(T), y = top + k.T.length * rowH + 4;
    out.push(`<g class="picked-T"><text class="label" x="${lw - 6}" y="${y + barH + 4}" text-anchor="end">you: ${T}</text>`,
      `<rect class="bar-scores" x="${lw}" y="${y}" width="${Math.max(2, x(m.score_bytes) - lw)}" height="${barH}"/>`,
      `<text class="bar-label" x="${Math.min(x(m.score_bytes) + 4, W - 70)}" y="${y + barH - 2}">${bytesText(m.score_bytes)}</text>`,
      `<rect class="bar-kept" x="${lw}" y="${y + barH + 2}" width="${Math.max(2, x(m.workspace_bytes) - lw)}" height="${barH}"/>`,
      `<text class="bar-label" x="${Math.min(x(m.workspace_bytes) + 4, W - 70)}" y="${y + 2 * barH}">${bytesText(m.workspace_bytes)}</text></g>`);
    out.push('</svg>');
    mount('kcost', [['fig-kcost', 'kcost', out.join(''), null]]);
    document.getElementById('kT-value').textContent = String(T);
    document.getElementById('kcost-story').textContent = `At T = ${T} the score matrix would take ${bytesText(m.score_bytes)}; ` +
      `the kernel asks for ${bytesText(m.workspace_bytes)}, ${(m.score_bytes / m.workspace_bytes).toPrecision(3)} times less.`;
    window.attnKernelCost = m;
    this.onFill = (n) => {
      if (n === 0) return writeSum('kcost', []);
      const i = Math.floor((n - 1) / 2);
      writeSum('kcost', [`T = ${k.T[i]}: T × T scores take ${bytesText(k.score_bytes[i])}` +
        (n % 2 === 0 ? `; the kernel keeps ${bytesText(k.workspace_bytes[i])}` : '')]);
    };
  },
});

// ---- 2. tiles ------------------------------------------------------------------------------

defineKernelStep('ktiles', {
  results: ['ktiles'],
  key: (c) => kernelKey(c, 'tiles'),
  collect() {
    const h = heatmaps.ktiles, b = kstate.block, n = h ? h.rows : 0, out = [];
    for (let bi = 0; bi < n; bi += b) for (let bj = 0; bj < n; bj += b)
      for (let i = bi; i < Math.min(n, bi + b); i++) for (let j = bj; j < Math.min(n, bj + b); j++) if (h.cells[i] && h.cells[i][j]) out.push(h.cells[i][j]);
    return out;
  },
  render(c) {
    const k = kernelData(c), t = labelWords(k.tokens), b = k.block, S = k.tiles.scores;
    mount('ktiles', [['fig-ktiles', 'ktiles', heatmapSvg('ktiles', `Q Kᵀ / √d_k in blocks of ${b} × ${b}`, S, t, t, { interactive: true }),
      (i, j) => {
        const bi = Math.floor(i / b), bj = Math.floor(j / b);
        return { lines: [`block (${bi + 1}, ${bj + 1}): queries ${rowWords(t, bi * b, bi * b + b)}, keys ${rowWords(t, bj * b, bj * b + b)}`,
          `score(${t[i]} → ${t[j]}) = Q[${t[i]}] · K[${t[j]}] × ${fmt(k.scale)} = ${sumText(k.Q[i].map((q, d) => [q, k.K[j][d]]), S[i][j] / k.scale)} × ${fmt(k.scale)} = ${fmt(S[i][j])}`] };
      }]]);
    // The blocks' edges, over the cells.
    const svg = heatmaps.ktiles.svg, first = heatmaps.ktiles.cells[0][0].querySelector('rect');
    const x0 = +first.getAttribute('x'), y0 = +first.getAttribute('y'), n = S.length, edges = [];
    for (let bi = 0; bi < n; bi += b) for (let bj = 0; bj < n; bj += b)
      edges.push(`<rect class="tile-edge" x="${x0 + bj * CW}" y="${y0 + bi * CH}" width="${Math.min(b, n - bj) * CW}" height="${Math.min(b, n - bi) * CH}"/>`);
    svg.insertAdjacentHTML('beforeend', edges.join(''));
  },
});

// ---- 3. the online softmax -------------------------------------------------------------------

defineKernelStep('konline', {
  key: (c) => kernelKey(c, 'online'),
  collect: () => {
    // Block by block: a block's keys, then the state after it.
    const all = [...document.querySelectorAll('#fig-konline .cell')];
    return all.sort((a, b) => (+a.dataset.order) - (+b.dataset.order));
  },
  render(c) {
    const k = kernelData(c), o = k.online, t = labelWords(k.tokens), n = t.length, b = k.block, r = o.row;
    const vcols = ['noun', 'verb', 'animal', 'thing'];
    const cw = PHONE ? 44 : 50, gap = 8, lw = 10 + 7.2 * Math.max(...t.map((w) => w.length), 13), top = 38, sw = PHONE ? 48 : 54;
    const range = rangeOf([k.scaled[r]], o.out, [o.m], [o.l]);
    const keysW = n * cw + (k.blocks - 1) * gap, stateTop = top + 3 * CH + 24;
    const width = Math.ceil(Math.max(lw + keysW, lw + 7 * sw) + 10);
    const height = stateTop + 34 + k.blocks * (CH + 20) + 6;
    const out = [`<svg class="heatmap kfig" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="group" aria-label="the online softmax of the row of ${esc(t[r])}, block by block">`,
      `<text class="title" x="2" y="14">the row of ${esc(t[r])}: its scaled scores, ${b} keys a block</text>`];
    let order = 0;
    const state = (bk, y) => {
      const cells = [['m', o.m[bk]], ['l', o.l[bk]], ['rescale', o.rescale[bk]], ...o.out[bk].map((v, j) => [`O ${vcols[j]}`, v])];
      return cells.map(([, v], j) => {
        const g = numCell(lw + j * sw, y, sw, CH, v, range, bk, j);
        return g.replace('<g class="cell', `<g data-order="${order++}" class="cell`);
      }).join('');
    };
    for (let bk = 0; bk < k.blocks; bk++) {
      // The block's keys.
      for (let j = bk * b; j < Math.min(n, bk * b + b); j++) {
        const x = lw + j * cw + bk * gap;
        out.push(`<text class="label" x="${x + cw / 2}" y="${top + 10}" text-anchor="middle">${esc(t[j])}</text>`);
        out.push(numCell(x, top + 14, cw, CH, k.scaled[r][j], range, -1, j).replace('<g class="cell', `<g data-order="${order++}" class="cell`));
      }
      const bx = lw + bk * b * cw + bk * gap;
      out.push(`<text class="muted-text" x="${bx}" y="${top + 14 + CH + 14}">block ${bk + 1}</text>`);
      // The state after it, with the rescale drawn when m grew.
      const y = stateTop + 34 + bk * (CH + 20);
      out.push(`<text class="label" x="${lw - 6}" y="${y + CH - 5}" text-anchor="end">after block ${bk + 1}</text>`, state(bk, y));
      // The rescale, drawn where m grew: what was kept is multiplied before the block is added.
      if (bk > 0 && o.rescale[bk] < 1)
        out.push(`<g class="rescale" data-block="${bk}"><path class="rescale-arrow" d="M ${lw + 2 * sw + sw / 2} ${y - 19} v 15 m -4 -5 l 4 5 l 4 -5"/>` +
          `<text class="rescale-text" x="${lw + 3 * sw + 4}" y="${y - 6}">m grew: l and the sum × e^(${fmt(o.m[bk - 1])} − ${fmt(o.m[bk])}) = ${fmt(o.rescale[bk])}</text></g>`);
    }
    ['m', 'l', 'rescale', 'noun', 'verb', 'animal', 'thing'].forEach((h, j) =>
      out.push(`<text class="label" x="${lw + j * sw + sw - 4}" y="${stateTop + 26}" text-anchor="end">${h}</text>`));
    out.push(`<text class="label" x="${lw + 3 * sw + 2}" y="${stateTop + 10}">O, the blend of values so far</text>`,
      `<line class="axis" x1="${lw + 3 * sw + 2}" x2="${lw + 7 * sw - 2}" y1="${stateTop + 14}" y2="${stateTop + 14}"/>`);
    const last = o.out[k.blocks - 1], firstPart = k.output[r];
    const d1 = maxDiff([last], [firstPart]), d2 = maxDiff([o.weights], [k.weights[r]]);
    const checked = d1 <= 1e-12 && d2 <= 1e-12;
    out.push('</svg>');
    mount('konline', [['fig-konline', 'konline', out.join('') + `<p class="check${checked ? ' ok' : ''}">${checked ? '✓' : '✗'} the last state is the softmax row of ${esc(t[r])} computed whole: ` +
      `O equals its output, e^(s − lse) its weights (largest difference ${sci(Math.max(d1, d2))})</p>`, null]]);
    document.getElementById('fig-konline').dataset.checked = checked ? '1' : '0';
    // The largest score in block 1 (one block, or no row whose maximum comes
    // later) means m never grows: no rescale to point at.
    const topBlock = 1 + Math.floor(k.scaled[r].indexOf(Math.max(...k.scaled[r])) / b);
    document.getElementById('konline-story').textContent = `The row of ${t[r]} is shown: its largest score comes in block ${topBlock}, ` +
      (topBlock > 1 ? 'so the state is rescaled when it arrives.'
        : `so m never grows after it and every rescale is 1${k.blocks > 1 ? ' (no row of this sentence has its largest score later)' : ''}.`);
    const units = [];
    for (let bk = 0; bk < k.blocks; bk++) {
      for (let j = bk * b; j < Math.min(n, bk * b + b); j++) units.push(['key', bk, j]);
      for (let j = 0; j < 7; j++) units.push(['state', bk, j]);
    }
    const firstState = (bk) => units.findIndex(([w, b2]) => w === 'state' && b2 === bk);
    const arrows = [...document.querySelectorAll('#fig-konline .rescale')];
    this.onFill = (m) => {
      for (const a of arrows) a.classList.toggle('shown', m > firstState(+a.dataset.block));
      if (m === 0) return writeSum('konline', []);
      const [what, bk, j] = units[m - 1];
      if (what === 'key') return writeSum('konline', [`block ${bk + 1} brings ${t[j]}: scaled score ${fmt(k.scaled[r][j])}; the block alone has lse ${fmt(o.block_lse[bk])}`]);
      const grew = bk > 0 && o.m[bk] > o.m[bk - 1];
      writeSum('konline', [
        bk === 0 ? `after block 1: m = ${fmt(o.m[0])}, l = ${fmt(o.l[0])}, O = (${o.out[0].map(fmt).join(', ')})`
          : `after block ${bk + 1}: m ${grew ? `grew from ${fmt(o.m[bk - 1])} to ${fmt(o.m[bk])}, so l and the weighted sum were rescaled by e^(${fmt(o.m[bk - 1])} − ${fmt(o.m[bk])}) = ${fmt(o.rescale[bk])}` : `stays ${fmt(o.m[bk])} (rescale 1)`}`,
        `l = ${fmt(o.l[bk])} (was ${bk ? fmt(o.l[bk - 1]) : '0'}), O = (${o.out[bk].map(fmt).join(', ')}), lse = m + log l = ${fmt(o.lse[bk])}`]);
    };
  },
});

// ---- 4. causal blocks skipped ---------------------------------------------------------------

defineKernelStep('kcausal', {
  key: (c) => kernelKey(c, 'causal'),
  collect: figCells('kcausal'),
  render(c) {
    const k = kernelData(c), cz = k.causal, nb = k.blocks, b = k.block, t = labelWords(k.tokens), n = t.length;
    const size = Math.max(26, Math.min(PHONE ? 40 : 56, Math.floor((PHONE ? 300 : 420) / nb))), lw = 90, top = 40;
    const width = Math.max(lw + nb * size + 12, PHONE ? 340 : 420), height = top + nb * size + 48;
    const NAMES = ['skip', 'part', 'all'];
    // A row of blocks at a time: mount draws a few rows a task (32 × 32 blocks at 64 words).
    const row = (bi) => {
      const out = [`<text class="label" x="${lw - 6}" y="${top + bi * size + size / 2 + 4}" text-anchor="end">${esc(rowWords(t, bi * b, bi * b + b).slice(0, 12))}</text>`];
      for (let bj = 0; bj < nb; bj++) {
        const kind = cz.kind[bi * nb + bj], x = lw + bj * size, y = top + bi * size;
        const fill = kind === 2 ? shade(0.6) : kind === 1 ? shade(0.3) : { fill: 'var(--panel)', ink: 'var(--ink)' };
        out.push(`<g class="cell block-${NAMES[kind]}${fillClass()}" data-i="${bi}" data-j="${bj}"${fillAttr()}>` +
          `<rect class="cell-bg" x="${x}" y="${y}" width="${size}" height="${size}" fill="${fill.fill}"/>` +
          (kind === 0 ? `<path class="skip-x" d="M ${x + 4} ${y + 4} l 7 7 M ${x + size - 4} ${y + 4} l -7 7 M ${x + 4} ${y + size - 4} l 7 -7 M ${x + size - 4} ${y + size - 4} l -7 -7"/>` : '') +
          `<text x="${x + size / 2}" y="${y + size / 2 + 4}" text-anchor="middle" fill="${fill.ink}">${NAMES[kind]}</text></g>`);
      }
      return out.join('');
    };
    mount('kcausal', [['fig-kcausal', 'kcausal', {
      open: `<svg class="heatmap kfig" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="group" aria-label="causal blocks: computed, masked in part, skipped">` +
        `<text class="title" x="2" y="14">${nb} × ${nb} blocks of ${b} × ${b}, causal</text>` +
        `<text class="muted-text" x="2" y="${height - 22}">all: computed whole · part: on the diagonal,</text>` +
        `<text class="muted-text" x="2" y="${height - 8}">masked in part · skip: never computed</text>`,
      row, rows: nb, cols: nb, close: '</svg>' }, null]]);
    const saved = 100 * (1 - cz.scores_computed / cz.scores_all);
    document.getElementById('kcausal-story').textContent = `Here ${cz.blocks_computed} of ${nb * nb} blocks are computed and ${cz.blocks_skipped} skipped: ` +
      `${cz.scores_computed} of ${cz.scores_all} scores, ${saved.toFixed(0)}% of the work saved.`;
    const kinds = cz.kind;
    this.onFill = (m) => {
      if (m === 0) return writeSum('kcausal', []);
      const bi = Math.floor((m - 1) / nb), bj = (m - 1) % nb, kind = kinds[m - 1];
      const skipped = kinds.slice(0, m).filter((x) => x === 0).length;
      writeSum('kcausal', [`block (${bi + 1}, ${bj + 1}): ${kind === 0 ? 'every key comes after every query: skipped' : kind === 1 ? 'on the diagonal: computed, the later keys masked' : 'every key comes before every query: computed whole'}`,
        `${m - skipped} computed, ${skipped} skipped so far`]);
    };
  },
});

// ---- 5. the KV cache ---------------------------------------------------------------------

defineKernelStep('kcache', {
  results: ['kcache-k', 'kcache-v', 'kcache-out'],
  key: (c) => kernelKey(c, 'cache'),
  collect() {
    const hs = ['kcache-k', 'kcache-v', 'kcache-out'].map((n) => heatmaps[n]);
    if (hs.some((h) => !h)) return [];
    const out = [];
    for (let i = 0; i < hs[0].rows; i++) for (const h of hs) if (h.cells[i]) out.push(...h.cells[i]);
    return out;
  },
  render(c) {
    const k = kernelData(c), t = labelWords(k.tokens), ca = k.cache, vcols = ['noun', 'verb', 'animal', 'thing'];
    const range = rangeOf(k.K, k.V, ca.output), dcols = k.K[0].map((_, j) => `d${j}`);
    mount('kcache', [
      ['fig-kcache-k', 'kcache-k', heatmapSvg('kcache-k', 'K cache', k.K, t, dcols, { range }), null],
      ['fig-kcache-v', 'kcache-v', heatmapSvg('kcache-v', 'V cache', k.V, t, vcols, { range }), null],
      ['fig-kcache-out', 'kcache-out', heatmapSvg('kcache-out', 'output through the cache', ca.output, t, vcols, { range, interactive: true }),
        (i, j) => ({ lines: [`${t[i]} attends to the ${i + 1} cached row${i ? 's' : ''} (${rowWords(t, 0, i + 1)}); the whole causal head gives ${fmt(k.causal_output[i][j])}`,
          `output[${t[i]}, ${vcols[j]}] through the cache = ${fmt(ca.output[i][j])}`], marks: [['kcache-full', { row: i }], ['kcache-k', { row: i }]] })],
      ['fig-kcache-full', 'kcache-full', heatmapSvg('kcache-full', 'the whole causal head', k.causal_output, t, vcols, { range }), null],
    ]);
    const g = ca.gqa, Hq = 8, Hk = 2, W = 300;
    const gqa = [`<svg class="heatmap kfig" width="${W}" height="110" role="group" aria-label="grouped-query heads share key and value heads">`,
      `<text class="title" x="2" y="14">grouped-query: 4 query heads share a K, V</text>`];
    for (let q = 0; q < Hq; q++) {
      const x = 10 + q * 35, kv = Math.floor(q / (Hq / Hk)), kx = 10 + kv * 140 + 50;
      gqa.push(`<line class="arrow" x1="${x + 14}" y1="44" x2="${kx + 30}" y2="78"/>`, `<rect class="q-head" x="${x}" y="26" width="28" height="18"/>`,
        `<text x="${x + 14}" y="39" text-anchor="middle" class="small">q${q}</text>`);
    }
    for (let kv = 0; kv < Hk; kv++) {
      const kx = 10 + kv * 140 + 50;
      gqa.push(`<rect class="kv-head" x="${kx}" y="78" width="60" height="20"/>`, `<text x="${kx + 30}" y="92" text-anchor="middle" class="small">K, V ${kv}</text>`);
    }
    gqa.push('</svg>');
    mount('kcache', [['fig-kcache-gqa', 'kcache-gqa', gqa.join(''), null]]);
    const d = maxDiff(ca.output, k.causal_output);
    document.getElementById('kcache-gqa').textContent = `Through the cache, every row equals the whole causal head's (largest difference ${sci(d)}). ` +
      `Grouped-query attention goes further: several query heads share one key and value head, so the cache holds fewer. ` +
      `For ${g.query_heads} query heads of ${g.head_dim} numbers and ${g.positions} positions in f16, one key and value head per query head takes ` +
      `${bytesText(g.bytes_one_kv_head_per_query_head)}; ${g.kv_heads} shared ones take ${bytesText(g.bytes_grouped)} (attn_kv_cache_bytes).`;
    window.attnKernelCacheDiff = d;
  },
});

// ---- 6. split-KV decode -----------------------------------------------------------------------

defineKernelStep('ksplit', {
  key: (c) => kernelKey(c, 'split', kstate.workers),
  collect: figCells('ksplit'),
  render(c) {
    const k = kernelData(c), sp = k.split, t = labelWords(k.tokens), n = t.length, vcols = ['noun', 'verb', 'animal', 'thing'];
    const rows = sp.out.map((o, p) => [`worker ${p + 1}`, sp.lse[p], ...o]);
    rows.push(['merged', sp.merged_lse, ...sp.merged]);
    const svg = kTable(`${t[n - 1]} attends to its cache, ${plural(sp.out.length, 'worker')}`, ['', 'lse', ...vcols], rows, { cw: PHONE ? 50 : 54 });
    const parts = sp.out.map((_, p) => `worker ${p + 1}: ${rowWords(t, sp.bounds[p], sp.bounds[p + 1])}`).join(' · ') +
      fewerParts(sp.out.length, kstate.workers, n, 'worker');
    const d = maxDiff([sp.merged], [k.output[n - 1]]);
    mount('ksplit', [['fig-ksplit', 'ksplit', svg + `<p class="muted-p">${esc(parts)}</p><p class="check${d <= 1e-12 ? ' ok' : ''}">${d <= 1e-12 ? '✓' : '✗'} merged = the row of one worker doing everything: (${k.output[n - 1].map(fmt).join(', ')}), largest difference ${sci(d)}</p>`, null]]);
    const cols = 1 + vcols.length;
    this.onFill = (m) => {
      if (m === 0) return writeSum('ksplit', []);
      const p = Math.floor((m - 1) / cols);
      if (p < sp.out.length) return writeSum('ksplit', [`worker ${p + 1} takes keys ${sp.bounds[p] + 1} to ${sp.bounds[p + 1]} (${rowWords(t, sp.bounds[p], sp.bounds[p + 1])}): lse ${fmt(sp.lse[p])}, out (${sp.out[p].map(fmt).join(', ')})`]);
      writeSum('ksplit', [`lse = log(${sp.lse.map((l) => `e^${fmt(l)}`).join(' + ')}) = ${fmt(sp.merged_lse)}`,
        `out = ${sp.lse.map((l, q) => `e^(${fmt(l)} − ${fmt(sp.merged_lse)})·out${q + 1}`).join(' + ')} = (${sp.merged.map(fmt).join(', ')})`]);
    };
  },
});

// ---- 7. pages ---------------------------------------------------------------------------------

defineKernelStep('kpages', {
  key: (c) => kernelKey(c, 'pages'),
  collect: figCells('kpages'),
  render(c) {
    const k = kernelData(c), pg = k.pages, ev = pg.events, P = pg.pool_pages;
    const sq = PHONE ? 24 : 30, lw = 4, top = 30, rowH = sq + 58;
    const width = lw + P * (sq + 3) + 10, height = top + ev.length * rowH + 24;
    const out = [`<svg class="heatmap kfig" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="group" aria-label="a pool of ${P} pages, sequences A and B">`,
      `<text class="title" x="2" y="14">a pool of ${P} pages of ${pg.page_size} positions</text>`];
    ev.forEach((e, i) => {
      const y = top + 18 + i * rowH, holders = (p) => ['A', 'B'].filter((_, s) => e.tables[s].includes(p)).join('');
      const pages = [];
      for (let p = 0; p < P; p++) {
        const who = holders(p), x = lw + p * (sq + 3);
        pages.push(`<rect class="page${who ? ` page-${who}` : ''}" x="${x}" y="${y}" width="${sq}" height="${sq}"/>` +
          (who ? `<text class="on-light" x="${x + sq / 2}" y="${y + sq / 2 + 4}" text-anchor="middle">${who}</text>` : ''));
      }
      out.push(`<g class="cell${fillClass()}" data-i="${i}" data-j="0"${fillAttr()}>`,
        `<rect class="cell-bg row-bg" x="0" y="${y - 18}" width="${width}" height="${rowH - 6}"/>`,
        `<text class="label" x="2" y="${y - 5}">${i + 1}. ${esc(e.what)} · ${e.free} pages free</text>`, ...pages,
        `<text class="muted-text" x="${lw}" y="${y + sq + 14}">A: ${e.lengths[0]} positions, pages [${e.tables[0].join(', ')}]</text>`,
        i ? `<text class="muted-text" x="${lw}" y="${y + sq + 28}">B: ${e.lengths[1]} positions, pages [${e.tables[1].join(', ')}]</text>` : '', '</g>');
    });
    out.push('</svg>');
    const d = maxDiff(pg.out, pg.reference);
    mount('kpages', [['fig-kpages', 'kpages', out.join('') + `<p class="check${d < 1e-6 ? ' ok' : ''}">${d < 1e-6 ? '✓' : '✗'} each new position attends over its pages as over a contiguous copy (largest difference ${sci(d)}, the pool holds f32)</p>`, null]]);
    const shared = ev[1].tables[1].filter((p) => ev[1].refs[p] === 2).length, copied = ev[2].tables[1].filter((p) => !ev[0].tables[0].includes(p)).length;
    document.getElementById('kpages-story').textContent = `Here the fork shares ${shared} page${shared === 1 ? '' : 's'}; when B appends, ` +
      (ev[0].lengths[0] % pg.page_size ? `its last page is partly full and shared, so B gets ${copied === 1 ? 'a copy of it' : `${copied} new pages`}` : 'its last page is full, so B starts a new page and every page of the prompt stays shared') + '.';
    const SAY = ['A holds the sentence: its keys and values fill its pages', 'fork: B gets a page table naming the same pages; each is now held by 2',
      'B appends one position: it writes only into a page of its own', 'A appends: the page it writes is its own again'];
    this.onFill = (m) => writeSum('kpages', m ? [`${SAY[m - 1]} (free pages: ${ev[m - 1].free} of ${P})`] : []);
  },
});

// ---- 8. the ring ------------------------------------------------------------------------------

defineKernelStep('kring', {
  key: (c) => kernelKey(c, 'ring', kstate.ranks),
  collect: figCells('kring'),
  render(c) {
    const k = kernelData(c), rg = k.ring, R = rg.ranks, t = labelWords(k.tokens), n = t.length;
    const bw = PHONE ? 62 : 110, bh = 44, gap = PHONE ? 16 : 30, lw = PHONE ? 44 : 56, top = 34, rowH = bh + 30;
    const width = lw + R * (bw + gap) + 6, height = top + R * rowH + 10;
    const out = [`<svg class="heatmap kfig" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="group" aria-label="ring attention on ${plural(R, 'rank')}">`,
      `<text class="title" x="2" y="14">${plural(R, 'rank')} in a ring; each row is one step</text>`];
    const shardOf = (r, s) => ((r - s) % R + R) % R;
    for (let s = 0; s < R; s++) {
      const y = top + s * rowH;
      out.push(`<text class="label" x="2" y="${y + bh / 2 + 4}">step ${s + 1}</text>`);
      // Each rank passes its shard to the next; the last hands it back to rank 0.
      for (let r = 0; r < R; r++) {
        const x = lw + r * (bw + gap) + bw;
        if (r < R - 1) out.push(`<path class="arrow" d="M ${x + 2} ${y + bh / 2} h ${gap - 6} m -5 -4 l 5 4 l -5 4"/>`);
        else out.push(`<path class="arrow" d="M ${x - bw / 2} ${y + bh} v 10 H ${lw + bw / 2} v -8 m -4 5 l 4 -5 l 4 5"/>`);
      }
      for (let r = 0; r < R; r++) {
        const x = lw + r * (bw + gap), sh = shardOf(r, s);
        out.push(`<g class="cell rank${fillClass()}" data-i="${s}" data-j="${r}"${fillAttr()}><rect class="rank-box" x="${x}" y="${y}" width="${bw}" height="${bh}"/>` +
          `<text x="${x + 6}" y="${y + 16}">rank ${r}</text>` +
          `<text x="${x + 6}" y="${y + 34}" class="small">${PHONE ? 'K,V' : 'holds K, V'} ${sh}</text></g>`);
      }
    }
    out.push('</svg>');
    const final = rg.steps[R - 1].out, d = maxDiff(final, k.output);
    const shards = Array.from({ length: R }, (_, r) => `shard ${r}: ${rowWords(t, rg.bounds[r], rg.bounds[r + 1])}`).join(' · ') +
      fewerParts(R, kstate.ranks, n, 'rank');
    mount('kring', [['fig-kring', 'kring', out.join('') + `<p class="muted-p">${esc(shards)}</p>` +
      `<p class="check${d <= 1e-12 ? ' ok' : ''}">${d <= 1e-12 ? '✓' : '✗'} after ${plural(R, 'step')} the ring's output equals one process's (largest difference ${sci(d)})</p>`, null]]);
    document.getElementById('kring-story').textContent = `Rank r keeps the queries of shard r (${shards}).`;
    this.onFill = (m) => {
      if (m === 0) return writeSum('kring', []);
      const s = Math.floor((m - 1) / R), r = (m - 1) % R, sh = shardOf(r, s), i = rg.bounds[r];
      writeSum('kring', [`step ${s + 1}: rank ${r} attends ${rowWords(t, rg.bounds[r], rg.bounds[r + 1])} to the keys of ${rowWords(t, rg.bounds[sh], rg.bounds[sh + 1])} and merges by lse`,
        `${t[i]} now: lse ${fmt(rg.steps[s].lse[i])}, out (${rg.steps[s].out[i].map(fmt).join(', ')})${s === R - 1 ? `; one process: (${k.output[i].map(fmt).join(', ')})` : ''}`]);
    };
  },
});

// ---- 9. the gradient --------------------------------------------------------------------------

defineKernelStep('kgrad', {
  key: (c) => kernelKey(c, 'grad'),
  collect: figCells('kgrad'),
  render(c) {
    const k = kernelData(c), g = k.gradient, t = labelWords(k.tokens), r = g.row, s = k.scaled[r];
    const rows = t.map((w, j) => [w, s[j], g.P[j], g.dP[j], g.dS[j], g.dS_library[j]]);
    const svg = kTable(`row of ${t[r]}, D = ${fmt(g.D)}`, ['key', 's', 'P', 'dP', 'dS', 'library'], rows, { range: rangeOf([s, g.P, g.dP]), cw: PHONE ? 50 : 54 });
    const sat = g.saturation;
    const satRows = sat.factor.map((f, i) => [`scores × ${f}`, sat.top_weight[i], sat.dS_norm[i]]);
    mount('kgrad', [['fig-kgrad', 'kgrad', svg, null],
      ['fig-ksat', 'ksat', kTable('the same row, scores multiplied', ['', 'top weight', '|dS|'], satRows, { cw: 80, range: 1 }), null]]);
    const n = t.length;
    // What the table shows for this row: a row with one largest score saturates,
    // one whose largest score several keys share splits the weight among them.
    const last = sat.factor.length - 1, top = Math.max(...s), tied = t.filter((w, j) => s[j] === top);
    const story = document.getElementById('kgrad-story');
    if (sat.dS_norm[0] === 0) story.textContent = `Here moving weight among the keys that ${t[r]} attends to would not change its output, so dS is 0 at every scale: there is no gradient to lose.`;
    else if (sat.top_weight[last] >= 0.9) story.innerHTML = 'One weight takes nearly everything, and dS, the signal that trains W<sub>Q</sub> and W<sub>K</sub>, vanishes.';
    else if (tied.length > 1) story.textContent = `Here ${tied.length} keys share the largest score of ${t[r]} (${tied.join(', ')}), so no one weight can take everything: ` +
      `they split it, and at × ${sat.factor[last]} the top weight is ${fmt(sat.top_weight[last])}, at most 1/${tied.length}. A row with a single largest score is the one that saturates.`;
    else story.textContent = `The top weight grows towards 1 (${fmt(sat.top_weight[last])} at × ${sat.factor[last]}), and |dS| goes from ${sat.dS_norm[0].toPrecision(3)} to ${sat.dS_norm[last].toPrecision(3)}.`;
    this.onFill = (m) => {
      if (m === 0) return writeSum('kgrad', []);
      if (m <= 5 * n) {
        const j = Math.floor((m - 1) / 5);
        return writeSum('kgrad', [`${t[j]}: P = e^(${fmt(s[j])} − ${fmt(k.online.lse[k.blocks - 1])}) = ${fmt(g.P[j])}; dP = dO · V[${t[j]}] = ${fmt(g.dP[j])}`,
          `dS = P × (dP − D) = ${fmt(g.P[j])} × (${fmt(g.dP[j])} − ${fmt(g.D)}) = ${fmt(g.dS[j])}; the library: ${fmt(g.dS_library[j])}`]);
      }
      const i = Math.min(sat.factor.length - 1, Math.floor((m - 1 - 5 * n) / 2));
      // |dS| is 0 at every scale when moving weight between the keys cannot change the output (one word,
      // or keys with the same values): then there is no ratio to give, only that.
      const flat = sat.dS_norm[0] === 0;
      writeSum('kgrad', [`scores × ${sat.factor[i]}: the top weight is ${fmt(sat.top_weight[i])} and |dS| = ${sat.dS_norm[i].toPrecision(3)}` +
        (flat ? ', as unscaled: moving weight between these keys would not change the output, so there is no gradient to lose'
          : !i ? '' : sat.dS_norm[i] <= sat.dS_norm[0] ? `, ${(sat.dS_norm[0] / sat.dS_norm[i]).toPrecision(3)} times smaller than unscaled`
            : `, ${(sat.dS_norm[i] / sat.dS_norm[0]).toPrecision(3)} times larger than unscaled`)]);
    };
  },
});

// Legends for the steps whose cells are numbers: one scale per figure.
Object.assign(LEGEND_OF, {
  ktiles: (c) => rangeOf(kernelData(c).tiles.scores),
  konline: (c) => { const k = kernelData(c), o = k.online; return rangeOf([k.scaled[o.row]], o.out, [o.m], [o.l]); },
  kcache: (c) => { const k = kernelData(c); return rangeOf(k.K, k.V, k.cache.output); },
  ksplit: (c) => { const sp = kernelData(c).split; return rangeOf([sp.lse], sp.out, [sp.merged], [[sp.merged_lse]]); },
  kgrad: (c) => { const k = kernelData(c), g = k.gradient; return rangeOf([k.scaled[g.row], g.P, g.dP]); },
});

// The second part's controls: each redraws the steps that depend on it.
function kernelControls() {
  // The steps' keys name the controls they depend on, so only those are drawn again.
  const on = (id, f) => document.getElementById(id).addEventListener('input', (e) => { f(e.target.value); scheduleSteps(); });
  on('kT', (v) => { kstate.logT = Number(v); });
  on('kblock', (v) => { kstate.block = Number(v); });
  on('kworkers', (v) => { kstate.workers = Number(v); });
  on('kranks', (v) => { kstate.ranks = Number(v); });
}
