// explainer.js -- the explainer page: a walk through one attention head, each
// step's figure pinned beside its text and played by the scroll. Every number
// comes from libattn (WebAssembly): the head's matrices from web_explain (the
// JSON of `attn explain --json`), the steps between them (X + P, Q before RoPE
// turns it, the rotation, the row sums, concat · W_O) from web_parts and
// web_heads. This file formats and draws; the only arithmetic it does is
// layout and colour.
'use strict';

// ---- the library --------------------------------------------------------------------

let lib = null;
let wasmBytes = null;

async function loadLibrary() {
  const text = atob(document.getElementById('wasm-module').textContent.trim());
  wasmBytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) wasmBytes[i] = text.charCodeAt(i);
  // The library does no I/O; these WASI imports exist only because libc
  // links them. They answer ENOSYS (52) if ever called.
  const nosys = () => 52;
  const imports = { wasi_snapshot_preview1: { fd_close: nosys, fd_seek: nosys, fd_write: nosys } };
  const { instance } = await WebAssembly.instantiate(wasmBytes, imports);
  lib = instance.exports;
  lib._initialize();
}

function readString(ptr) {
  const mem = new Uint8Array(lib.memory.buffer);
  let end = ptr;
  while (mem[end]) end++;
  return new TextDecoder().decode(mem.subarray(ptr, end));
}

// A string in the library's memory (free it with lib.web_free). A NUL in the
// text (a link's %00) becomes a space, the separator it is to the tokenizer:
// the C string would end there, and the words after it would silently go.
function cString(text) {
  const bytes = new TextEncoder().encode(text.replace(/\0/g, ' ') + '\0');
  const ptr = lib.web_alloc(bytes.length);
  new Uint8Array(lib.memory.buffer).set(bytes, ptr);
  return ptr;
}

// A matrix (list of rows) or list as doubles in the library's memory.
function cDoubles(m) {
  const flat = new Float64Array(m.flat());
  const ptr = lib.web_alloc(Math.max(8, flat.length * 8));
  new Float64Array(lib.memory.buffer, ptr, flat.length).set(flat);
  return ptr;
}

// Call fn with C copies of the arguments (strings, or matrices as doubles), freed after.
function withC(args, fn) {
  const ptrs = args.map((a) => (a === null ? 0 : typeof a === 'string' ? cString(a) : cDoubles(a)));
  try {
    return JSON.parse(readString(fn(...ptrs)));
  } finally {
    for (const p of ptrs) if (p) lib.web_free(p);
  }
}

const POSITIONS = ['none', 'sinusoidal', 'rope'];
const HEAD_CODES = { wired: 0, random: 1, where: 2 };

// The toy model on `sentence`: the JSON of `attn explain --json`, or {error, start, length, suggestion}.
function explain(s, head = s.head) {
  return withC([s.sentence, s.source], (sp, src) => lib.web_explain(sp, HEAD_CODES[head], s.causal ? 1 : 0,
    s.noScale ? 1 : 0, 0, Math.max(0, POSITIONS.indexOf(s.positions)), s.tied ? 1 : 0, src, s.scaleByModel ? 1 : 0));
}

// The steps between r's matrices, by the library (see web_parts in attn_web.c).
function parts(r) {
  const m = r.source_tokens ? r.source_tokens.length : r.tokens.length;
  return withC([r.X, r.X_source, r.W_Q, r.W_K, r.W_V], (x, xs, wq, wk, wv) => lib.web_parts(r.tokens.length, m,
    r.d_model, r.d_k, r.d_v, x, xs, wq, wk, wv, Math.max(0, POSITIONS.indexOf(r.positions)), r.causal ? 1 : 0,
    state.noScale ? 1 : 0, state.scaleByModel ? 1 : 0));
}

let vocabCache = null;
function vocab() {
  if (!vocabCache) vocabCache = JSON.parse(readString(lib.web_vocab()));
  return vocabCache;
}
let embeddingCache = null;
function embedding() {
  if (!embeddingCache) embeddingCache = JSON.parse(readString(lib.web_embedding())).E;
  return embeddingCache;
}

// ---- the measurements of sqrt(d_k), in a worker -------------------------------------------

// attn_scaling_measure runs for seconds at d_k = 1024, so it runs in a Web
// Worker made from this text (a Blob URL: the page stays one file), with the
// same module. Fallback without workers: one row per task, after the rest.
const WORKER_SOURCE = `
let lib = null;
const rd = (p) => { const m = new Uint8Array(lib.memory.buffer); let e = p; while (m[e]) e++;
  return new TextDecoder().decode(m.subarray(p, e)); };
onmessage = async (ev) => {
  const m = ev.data;
  if (m.wasm) {
    const nosys = () => 52;
    const { instance } = await WebAssembly.instantiate(m.wasm,
      { wasi_snapshot_preview1: { fd_close: nosys, fd_seek: nosys, fd_write: nosys } });
    lib = instance.exports;
    lib._initialize();
    postMessage({ ready: true });
    return;
  }
  postMessage({ id: m.id, row: JSON.parse(rd(lib.web_scaling(m.d, m.queries, m.keys, m.seed))) });
};`;

let worker = null, workerReady = null;
const pending = new Map();
let nextId = 0;
const scalingRows = new Map(); // "d,queries,keys,seed" -> Promise of the row

function startWorker() {
  try {
    worker = new Worker(URL.createObjectURL(new Blob([WORKER_SOURCE], { type: 'text/javascript' })));
  } catch (e) {
    worker = null;
    return;
  }
  workerReady = new Promise((resolve) => {
    worker.onmessage = (ev) => {
      if (ev.data.ready) return resolve();
      const p = pending.get(ev.data.id);
      pending.delete(ev.data.id);
      if (p) p(ev.data.row);
    };
  });
  worker.postMessage({ wasm: wasmBytes.slice().buffer });
}

function scaling(d, queries, keys, seed) {
  const key = `${d},${queries},${keys},${seed}`;
  if (!scalingRows.has(key)) {
    scalingRows.set(key, worker
      ? workerReady.then(() => new Promise((resolve) => {
        const id = nextId++;
        pending.set(id, resolve);
        worker.postMessage({ id, d, queries, keys, seed });
      }))
      : new Promise((resolve) => setTimeout(() => resolve(JSON.parse(readString(lib.web_scaling(d, queries, keys, seed)))), 0)));
  }
  return scalingRows.get(key);
}

// ---- state and the URL fragment -------------------------------------------------------------

const DEFAULT_SENTENCE = 'the cat sat on the mat';
const state = { sentence: DEFAULT_SENTENCE, causal: false, head: 'wired', noScale: false, positions: 'none',
  heads: 1, tied: false, source: '', scaleByModel: false, result: null, parts: null };

function readFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  state.sentence = params.has('s') ? params.get('s') : DEFAULT_SENTENCE;
  state.causal = params.get('causal') === '1';
  state.head = params.get('head') === 'random' ? 'random' : 'wired';
  state.noScale = params.get('noscale') === '1';
  state.positions = POSITIONS.includes(params.get('pos')) ? params.get('pos') : 'none';
  state.heads = params.get('heads') === '2' ? 2 : 1;
  state.tied = params.get('tied') === '1';
  state.source = (params.get('src') || '').trim();
  state.scaleByModel = params.get('scaleby') === 'd_model';
}

function writeFragment() {
  const params = new URLSearchParams();
  params.set('s', state.sentence);
  if (state.causal) params.set('causal', '1');
  if (state.head !== 'wired') params.set('head', state.head);
  if (state.noScale) params.set('noscale', '1');
  if (state.positions !== 'none') params.set('pos', state.positions);
  if (state.heads === 2) params.set('heads', '2');
  if (state.tied) params.set('tied', '1');
  if (state.source) params.set('src', state.source);
  if (state.scaleByModel) params.set('scaleby', 'd_model');
  const hash = '#' + params.toString();
  if (location.hash !== hash) history.replaceState(null, '', hash);
}

// ---- formatting and colour ------------------------------------------------------------------

// The number as shown: 3 decimals, masked scores as -inf, no "-0.000".
function fmt(x) {
  if (x === null) return '-inf';
  const s = x.toFixed(3);
  return s === '-0.000' ? '0.000' : s;
}
const pct = (w) => `${(100 * w).toFixed(0)}%`;
const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

// Repeated words get a subscript, the₁ and the₂, here as in attn explain.
const SUB = '₀₁₂₃₄₅₆₇₈₉';
function labelWords(words) {
  const total = {}, seen = {};
  for (const w of words) total[w] = (total[w] || 0) + 1;
  return words.map((w) => {
    if (total[w] < 2) return w;
    seen[w] = (seen[w] || 0) + 1;
    return w + String(seen[w]).split('').map((d) => SUB[d]).join('');
  });
}

// Relative luminance and contrast (WCAG 2), to pick a cell's ink.
function luminance([r, g, b]) {
  const lin = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}
const contrast = (a, b) => (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
const DARK = matchMedia('(prefers-color-scheme: dark)').matches;
const ZERO = DARK ? [40, 40, 46] : [255, 255, 255];

// Zero at the page's cell colour, red for positive, blue for negative: the
// colours of attn explain in the terminal. Ink black or white, whichever
// contrasts more; where neither reaches 4.5:1 the shade is deepened until
// white does (the full red and blue both pass with white).
const shadeCache = new Map();
function shade(t) {
  const key = Math.round(t * 200);
  if (shadeCache.has(key)) return shadeCache.get(key);
  const end = key >= 0 ? [214, 39, 40] : [31, 119, 180];
  let a = Math.min(1, Math.abs(key / 200));
  let c, ink;
  for (;;) {
    c = end.map((e, k) => Math.round(ZERO[k] + (e - ZERO[k]) * a));
    const l = luminance(c), white = contrast(l, 1), black = contrast(l, 0);
    if (black >= 4.5 && black >= white) { ink = '#000'; break; }
    if (white >= 4.5) { ink = '#fff'; break; }
    if (a >= 1) { ink = white > black ? '#fff' : '#000'; break; }
    a = Math.min(1, a + (DARK ? -0.02 : 0.02));
    if (a <= 0) { a = 0; c = ZERO; ink = DARK ? '#fff' : '#000'; break; }
  }
  const out = { fill: `rgb(${c.join(',')})`, ink };
  shadeCache.set(key, out);
  return out;
}

// The largest |x| of some matrices: one colour scale for one figure.
function rangeOf(...ms) {
  let r = 0;
  for (const m of ms) if (m) for (const row of m) for (const x of row) if (x !== null && Math.abs(x) > r) r = Math.abs(x);
  return r || 1;
}

// ---- heatmaps --------------------------------------------------------------------------------

let drawingResults = new Set(); // the names of the matrices the step being drawn fills
const heatmaps = {}; // name -> {svg, cells[i][j], rows, cols, explain(i, j), step}
const PHONE = innerWidth < 820, CW = PHONE ? 46 : 50, CH = PHONE ? 17 : 20; // a phone: rows a little tighter, the font still 12 px

// A labelled matrix as SVG text. Cells are <g class="cell" data-i data-j>
// holding a rect and the number (the tests read these). opts: range (the
// figure's colour scale), rowSums (the library's), masked(i, j), compact
// (colour only, narrow cells), pickedCols, rowButtons.
function heatmapSvg(name, title, data, rowLabels, colLabels, opts = {}) {
  const rows = data.length, cols = data[0].length;
  const cw = opts.compact ? 14 : CW, ch = opts.compact ? 14 : CH;
  const lw = 10 + 7.2 * Math.max(...rowLabels.map((l) => l.length));
  const short = colLabels.every((l) => l.length <= 4);
  const lh = short ? 18 : 14 + 6.2 * Math.max(...colLabels.map((l) => Math.min(l.length, 11))) * (opts.compact ? 1 : 0.7);
  const sums = opts.rowSums ? 1 : 0;
  const overhang = short || opts.compact ? 4 : 5 * Math.min(11, colLabels[cols - 1].length);
  const width = Math.ceil(lw + (cols + sums) * cw + Math.max(8, overhang)), height = Math.ceil(22 + lh + rows * ch + 4);
  const range = opts.range || rangeOf(data);
  const top = 22 + lh;
  const open = [`<svg class="heatmap" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" data-name="${name}"` +
    ` role="group" aria-label="${esc(title)}, ${rows} by ${cols}${opts.interactive ? ': the arrow keys explain a cell' : ''}"` +
    `${opts.interactive ? ' tabindex="0"' : ''}>`,
    `<text class="title" x="2" y="14">${esc(title)}  (${rows}, ${cols})</text>`];
  const out = open;
  colLabels.forEach((l, j) => {
    const x = lw + j * cw + cw / 2, picked = opts.pickedCols && opts.pickedCols.has(j) ? ' picked' : '';
    if (short) out.push(`<text class="label" x="${x}" y="${top - 5}" text-anchor="middle">${esc(l)}</text>`);
    else out.push(`<text class="label${picked}" x="${x + 4}" y="${top - 4}" transform="rotate(${opts.compact ? -90 : -40} ${x + 4} ${top - 4})">${esc(l)}</text>`);
  });
  if (sums) out.push(`<text class="label" x="${lw + cols * cw + cw / 2}" y="${top - 5}" text-anchor="middle">sum</text>`);
  // A result that the scroll fills starts empty (full under reduced motion).
  const fills = drawingResults.has(name);
  const fillAttr = fills ? ` data-filled="${reducedMotion.matches ? 1 : 0}"` : '';
  const fillState = fills && !reducedMotion.matches ? ' empty' : '';
  const row = (i) => {
    const out = [];
    const y = top + i * ch;
    const button = opts.rowButtons ? ` tabindex="0" role="button" aria-label="${esc(rowLabels[i])}: show its attention as bars"` : '';
    out.push(`<text class="label row-label" x="${lw - 6}" y="${y + ch - 5}" text-anchor="end" data-i="${i}"${button}>${esc(rowLabels[i])}</text>`);
    for (let j = 0; j < cols; j++) {
      const x = data[i][j];
      const c = x === null ? { fill: DARK ? '#55555c' : '#c8c8cc', ink: DARK ? '#fff' : '#000' } : shade(x / range);
      const masked = opts.masked && opts.masked(i, j);
      const text = opts.compact ? '' : `<text x="${lw + j * cw + cw - 4}" y="${y + ch - 5}" text-anchor="end" fill="${c.ink}">${masked ? '·' : fmt(x)}</text>`;
      out.push(`<g class="cell${fillState}" data-i="${i}" data-j="${j}"${fillAttr}><rect class="cell-bg" x="${lw + j * cw}" y="${y}" width="${cw}" height="${ch}" fill="${c.fill}"/>${text}</g>`);
    }
    if (sums) out.push(`<text class="label row-sum${fillState ? ' pending' : ''}" x="${lw + cols * cw + cw - 4}" y="${y + ch - 5}" text-anchor="end">${fmt(opts.rowSums[i])}</text>`);
    return out.join('');
  };
  return { open: open.join(''), row, rows, close: '</svg>', cols };
}

// Put figures into a step's boxes: each box gets a scroll hint and a
// keyboard-reachable scroller; each heatmap is registered for hovering. A
// large matrix goes in a few rows per task (the jobs below), so that no task
// runs long. specs: [boxId, name, svg (heatmapSvg's parts or text), explain(i, j) or null].
const CHUNK_CELLS = 160;
const rowsText = (parts, a, b) => { const out = []; for (let i = a; i < Math.min(b, parts.rows); i++) out.push(parts.row(i)); return out.join(''); };
function mount(step, specs) {
  for (const [box, name, svg, how] of specs) {
    const el = document.getElementById(box);
    if (!svg) { el.replaceChildren(); el.hidden = true; delete heatmaps[name]; continue; }
    el.hidden = false;
    const parts = typeof svg === 'string' ? null : svg;
    const per = parts ? Math.max(1, Math.floor(CHUNK_CELLS / parts.cols)) : 0;
    el.innerHTML = `<p class="scroll-hint">&larr; scroll sideways for the rest &rarr;</p>` +
      `<div class="scroll">` +
      `${parts ? parts.open + rowsText(parts, 0, per) + parts.close : svg}</div>`;
    if (!parts) continue;
    const svgEl = el.querySelector('svg');
    const h = { svg: svgEl, cells: [], rows: parts.rows, cols: parts.cols, explain: how, step };
    // Register the cells after `from` (the element before the new rows), without searching the whole matrix again.
    const adopt = (from) => {
      for (let e = from ? from.nextElementSibling : svgEl.firstElementChild; e; e = e.nextElementSibling)
        if (e.classList.contains('cell')) (h.cells[+e.dataset.i] = h.cells[+e.dataset.i] || [])[+e.dataset.j] = e;
    };
    adopt(null);
    heatmaps[name] = h;
    // Outside the walk's steps nothing reads whether a figure overflows (see markScroller):
    // a figure there may always scroll, so its scroller always takes the focus.
    if (!el.closest('.step')) markScroller(el, true, false);
    for (let a = per; a < parts.rows; a += per) {
      queueJob(() => {
        if (heatmaps[name] !== h) return; // redrawn since: this part is stale
        const last = svgEl.lastElementChild;
        svgEl.insertAdjacentHTML('beforeend', rowsText(parts, a, a + per));
        adopt(last);
        refreshCells(step);
      });
    }
  }
}

// The jobs: drawing left over for later tasks, run about 12 ms at a time. None
// is ever dropped: each checks, when it runs, whether its work is still to do (a
// heatmap's rows whether the heatmap was drawn again since, a step's render
// whether the step is still dirty, the kernel's walk whether it is done), and
// a job dropped left its work undone with nothing to do it again. A job already
// waiting is not queued twice (the kernel walk's, which every step of that part needs).
const jobs = [];
let jobTimer = null;
function queueJob(f) {
  if (!jobs.includes(f)) jobs.push(f);
  jobsChanged();
}
// body[data-rendered] says whether everything is drawn: 1 once no job waits.
function jobsChanged() {
  document.body.dataset.rendered = jobs.length ? '0' : '1';
  if (jobs.length && !jobTimer) jobTimer = setTimeout(runJobs, 0);
}
// A job whose alone() says it has long work to do (the kernel walk's) gets a
// task to itself: it runs only first in a task, and the task ends after it.
// A job that throws is reported as thrown (the console), and the jobs after it
// still run: stopping there would strand them, the page half drawn for good.
function runJobs() {
  jobTimer = null;
  const t0 = performance.now();
  try {
    for (let first = true; jobs.length && performance.now() - t0 < 12; first = false) {
      const alone = jobs[0].alone && jobs[0].alone();
      if (alone && !first) break;
      jobs.shift()();
      if (alone) break;
    }
  } finally {
    jobsChanged();
  }
}
function drainJobs() {
  try {
    while (jobs.length) jobs.shift()();
  } finally {
    jobsChanged();
  }
}

// A step's result cells, in the order its scroll fills them, after more
// arrived. The new cells came drawn empty (full under reduced motion), as
// setFill expects of cells past step.filled; the fill that the scroll asks for
// is set in the next frame, where the layout is read once for every step.
function refreshCells(stepId) {
  const step = steps[stepId];
  if (!step || (!step.results && !step.collect)) return;
  step.cells = step.collect ? step.collect() : step.results.flatMap((n) => (heatmaps[n] ? heatmaps[n].cells.flat() : []));
  if (reducedMotion.matches) step.filled = step.cells.length;
  if (step.onFill) step.onFill(step.filled); // what the step shows beside its cells, for the new ones too
  needFill.add(step);
  if (!fillFrame) fillFrame = requestAnimationFrame(fillDrawn);
}

// A figure's scroller is a tab stop and a named region only while the figure is
// wider than its box: then the keyboard needs it to scroll, and a screen reader
// hears the figure's own name (its SVG's label), not forty regions that do not scroll.
function markScroller(fig, over, says = over) {
  const s = fig.querySelector('.scroll');
  if (!s) return;
  const svg = s.querySelector('svg[aria-label]');
  if (over) {
    s.tabIndex = 0;
    s.setAttribute('role', 'region');
    // The same matrix can be wide in two steps (X in Q's and in K's): the step's title keeps the names apart.
    const step = fig.closest('.step'), title = step && step.querySelector('h3');
    s.setAttribute('aria-label', `${svg ? svg.getAttribute('aria-label') : 'a figure'}${title ? ` (${title.textContent.trim()})` : ''}${says ? ': it scrolls sideways' : ''}`);
  } else for (const a of ['tabindex', 'role', 'aria-label']) s.removeAttribute(a);
}

// Which figures of a section are wider than their box (a read of the layout).
function overflowing(section) {
  return [...section.querySelectorAll('.fig')].map((el) => {
    const s = el.querySelector('.scroll');
    return [el, s && s.scrollWidth > s.clientWidth + 1 ? '1' : '0'];
  });
}

function clearHighlights(stepId) {
  for (const h of Object.values(heatmaps)) {
    if (h.step !== stepId) continue;
    for (const g of h.svg.querySelectorAll('g.hl, g.active')) g.classList.remove('hl', 'active');
  }
}

function highlight(name, { row = -1, col = -1 }) {
  const h = heatmaps[name];
  if (!h) return;
  if (row >= 0 && h.cells[row]) h.cells[row].forEach((g) => g.classList.add('hl'));
  if (col >= 0) h.cells.forEach((r) => r[col] && r[col].classList.add('hl'));
}

// Explain cell (i, j) of heatmap `name`: its own outline, the row and column
// that made it, and the sum under the figure.
function showCell(name, i, j) {
  const h = heatmaps[name];
  if (!h || !h.explain || !h.cells[i] || !h.cells[i][j]) return;
  clearHighlights(h.step);
  h.active = [i, j];
  h.cells[i][j].classList.add('active');
  const { lines, marks = [] } = h.explain(i, j);
  for (const [other, at] of marks) highlight(other, at);
  writeSum(h.step, lines);
}

// What the scroll fills must not move the scroll. A step's sum (and its "k of n")
// changes with every cell the scroll fills, and a longer one can wrap onto one more
// line: the step grew, Chromium's scroll anchoring moved the scroll to keep the text
// below it in place, that moved the fill to a cell whose sum wrapped onto one line
// less, the step shrank, the scroll moved back, and so on at every frame, forever (a
// 320 px phone with the focus on the first slider of the kernel part). So each of these
// boxes keeps the largest size it has had at this width: the fill can make it grow,
// never shrink, and the layout settles after the longest sum it has shown. A new width
// wraps them anew, so it starts over. The size kept is that of texts the box has shown,
// so it goes with them: when the step is drawn anew (its numbers, hence its sums, are
// others) and when the step has left the view (releaseStep), else a box kept the line of
// a long sum shown once, under every shorter one after it, until the width changed. Neither
// is driven by the fill, so neither can start the loop again: the box shrinks once, then
// holds anew. Out of the view, the browser's scroll anchoring keeps what is in view in place.
const HELD = new WeakMap(); // box -> its largest size so far, [width, height]
let holdWatch = null, heldWidth = 0;
function holdSize(box) {
  if (!holdWatch) holdWatch = new ResizeObserver((entries) => {
    for (const e of entries) {
      const { inlineSize: w, blockSize: h } = e.borderBoxSize[0], el = e.target;
      const was = HELD.get(el) || [0, 0], wide = el.classList.contains('fill-count');
      if (h > was[1] + 0.5) el.style.minHeight = `${h}px`;
      if (wide && w > was[0] + 0.5) el.style.minWidth = `${w}px`;
      HELD.set(el, [Math.max(w, was[0]), Math.max(h, was[1])]);
    }
  });
  holdWatch.observe(box, { box: 'border-box' });
}
function releaseBox(el) {
  if (!el) return;
  HELD.delete(el);
  el.style.minHeight = el.style.minWidth = '';
}
function releaseHeld() {
  if (innerWidth === heldWidth) return;
  heldWidth = innerWidth;
  document.querySelectorAll('.sum, .fill-count').forEach(releaseBox);
}
// A step's sum and its "k of n", to hold the texts it shows from now on.
function releaseStep(step) {
  step.sizeHeld = false;
  releaseBox(document.getElementById(`sum-${step.id}`));
  releaseBox(document.querySelector(`#step-${step.id} .fill-count`));
}

function writeSum(stepId, lines) {
  const box = document.getElementById(`sum-${stepId}`);
  if (!box) return;
  box.replaceChildren(...lines.map((l) => Object.assign(document.createElement('p'), { className: 'sum-line', textContent: l })));
  sayLater(stepId);
}

// The sums under the figures are not live regions: the scroll and the player
// rewrite them on every cell, and a screen reader would read out each one.
// One hidden live region (#say) says a step's sum once it settles: when
// nothing has rewritten it for SETTLE_MS (a scroll stopped, the mouse came to
// rest), when a play ends, or at once for a key or a button.
const SETTLE_MS = 700;
let sayTimer = 0, sayStep = null;
function sayLater(stepId) {
  sayStep = stepId;
  clearTimeout(sayTimer);
  sayTimer = setTimeout(sayNow, SETTLE_MS);
}
function sayNow() {
  clearTimeout(sayTimer);
  sayTimer = 0;
  const box = sayStep && document.getElementById(`sum-${sayStep}`);
  sayStep = null;
  if (box) say([...box.children].map((p) => p.textContent).filter((l) => l).join('. '));
}
function say(text) {
  const out = document.getElementById('say');
  if (out && text && out.textContent !== text) out.textContent = text;
}

// "a×b + c×d + ... = total", the sum behind one cell, every term from the page's numbers.
function sumText(pairs, total) {
  return `${pairs.map(([a, b]) => `${fmt(a)}×${fmt(b)}`).join(' + ')} = ${fmt(total)}`;
}

const column = (m, j) => m.map((row) => row[j]);
const transpose = (m) => m[0].map((_, j) => column(m, j));

// ---- the steps -----------------------------------------------------------------------------

// Each step: the figures it draws (render), the cells its scroll fills in
// order (results), and a key of what it depends on, so a change of state
// redraws exactly the steps whose inputs changed.
const steps = {};
function defineStep(id, def) {
  const s = steps[id] = Object.assign({ id, key: null, filled: -1, cells: [], dirty: true }, def);
  s.job = () => { if (s.dirty) renderStep(s); }; // its render as a job (queueStep): one object, queued once
}

function ctx() {
  const r = state.result, p = state.parts;
  const t = labelWords(r.tokens), s = r.source_tokens ? labelWords(r.source_tokens) : t;
  const dcols = r.Q[0].map((_, j) => `d${j}`);
  const vcols = r.value_features.map((f, j) => f || `v${j}`);
  const rope = r.positions === 'rope', sin = r.positions === 'sinusoidal';
  return { r, p, t, s, dcols, vcols, rope, sin, cross: !!r.source_tokens };
}

// Q[i][j] (or K) explained: the projection's sum, then with RoPE the turn.
function projectionLines(c, which, i, j) {
  const { r, p, t, s, dcols, rope } = c;
  const isQ = which === 'Q';
  const words = isQ ? t : s;
  const rowsIn = isQ ? p.XP : (c.cross ? r.X_source : p.XP);
  const inName = c.sin && !(!isQ && c.cross) ? 'X+P' : c.cross && !isQ ? 'X_source' : 'X';
  const W = isQ ? r.W_Q : r.W_K, pre = isQ ? p.Q_pre : p.K_pre, post = isQ ? r.Q : r.K;
  const w = `W_${which}`;
  const first = `${rope ? `${which}̃` : which}[${words[i]}, ${dcols[j]}] = ${inName}[${words[i]}] · ${w}[·, ${dcols[j]}] = ` +
    sumText(rowsIn[i].map((x, k) => [x, W[k][j]]), pre[i][j]);
  if (!rope) return [first];
  const half = r.d_k / 2, pair = j % half, [cos, sinv] = [p.rope[i][2 * pair], p.rope[i][2 * pair + 1]];
  const a = pre[i][pair], b = pre[i][pair + half];
  // RoPE turns the pair (a, b) by the position's angle: (a cos - b sin, b cos + a sin).
  const second = j < half
    ? `${which}[${words[i]}, ${dcols[j]}] = cos θ·${which}̃${pair} − sin θ·${which}̃${pair + half} = ${fmt(cos)}×${fmt(a)} + ${fmt(-sinv)}×${fmt(b)} = ${fmt(post[i][j])}`
    : `${which}[${words[i]}, ${dcols[j]}] = cos θ·${which}̃${j} + sin θ·${which}̃${pair} = ${fmt(cos)}×${fmt(b)} + ${fmt(sinv)}×${fmt(a)} = ${fmt(post[i][j])}`;
  return [first, second, `(position ${i}, pair ${pair}: cos θ = ${fmt(cos)}, sin θ = ${fmt(sinv)})`];
}

defineStep('rnn', {
  key: (c) => JSON.stringify(c.t),
  render(c) {
    const n = c.t.length, gap = Math.max(58, 8 + 7.5 * Math.max(...c.t.map((w) => w.length))), w = 20 + n * gap, h = 240;
    const out = [`<svg class="chain" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" role="img" aria-label="an RNN passes one memory vector h from word to word; attention links every word to every other in one hop">`,
      `<text class="muted-text" x="4" y="14">an RNN: one memory h, handed down word by word</text>`];
    c.t.forEach((word, i) => {
      const x = 10 + i * gap;
      out.push(`<text x="${x + gap / 2 - 6}" y="92" text-anchor="middle">${esc(word)}</text>`);
      out.push(`<line class="arrow" x1="${x + gap / 2 - 6}" y1="78" x2="${x + gap / 2 - 6}" y2="60"/>`);
      out.push(`<g class="cell node${reducedMotion.matches ? '' : ' empty'}" data-i="0" data-j="${i}" data-filled="${reducedMotion.matches ? 1 : 0}"><rect x="${x + 4}" y="28" width="${gap - 20}" height="30" rx="5"/>` +
        `<text x="${x + gap / 2 - 6}" y="48" text-anchor="middle">h${i + 1}</text></g>`);
      if (i + 1 < n) out.push(`<line class="arrow" x1="${x + gap - 16}" y1="43" x2="${x + gap + 4}" y2="43" marker-end="url(#arr)"/>`);
    });
    out.push(`<defs><marker id="arr" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="currentColor"/></marker></defs>`);
    out.push(`<text class="muted-text" x="4" y="126">attention: one hop from any word to any other</text>`);
    const last = 10 + (n - 1) * gap + gap / 2 - 6;
    for (let j = 0; j < n - 1; j++) {
      const x = 10 + j * gap + gap / 2 - 6, mid = (x + last) / 2, depth = 175 + Math.min(55, (last - x) / 6);
      out.push(`<path class="hop" d="M${last},160 Q${mid},${depth} ${x},160"/>`);
    }
    c.t.forEach((word, i) => out.push(`<text x="${10 + i * gap + gap / 2 - 6}" y="152" text-anchor="middle">${esc(word)}</text>`));
    out.push('</svg>');
    const box = document.getElementById('fig-rnn');
    box.innerHTML = `<p class="scroll-hint">&larr; scroll sideways for the rest &rarr;</p><div class="scroll">${out.join('')}</div>`;
    this.cells = [...box.querySelectorAll('g.node')];
    this.onFill = (k) => {
      if (k <= 0) return writeSum('rnn', ['']);
      const before = c.t.slice(0, k - 1);
      writeSum('rnn', [k === 1 ? `h1 holds "${c.t[0]}" alone.`
        : `h${k} = f(h${k - 1}, ${c.t[k - 1]}): all it knows of "${before.join(' ')}" came through h${k - 1}, ${k - 1} step${k > 2 ? 's' : ''} down the chain.`]);
    };
  },
});

defineStep('embed', {
  results: ['X'],
  key: (c) => JSON.stringify([c.t, c.r.X, c.p.P]),
  render(c) {
    const { r, p, t } = c;
    const v = vocab(), E = embedding();
    const ids = r.tokens.map((w) => v.words.indexOf(w));
    document.getElementById('lookup').textContent =
      `ids: ${t.map((w, i) => `${w} → ${ids[i]}`).join(', ')}; X = E[ids], the table's rows for these ids ` +
      `(E has ${v.words.length} rows, one per word of the vocabulary).`;
    const range = rangeOf(E, r.X, p.P, p.XP);
    const specs = [
      ['fig-E', 'E', heatmapSvg('E', 'E, the embedding table, turned on its side (a column per id)', transpose(E), r.features,
        v.words.map((w, id) => `${id} ${w}`), { compact: true, range, pickedCols: new Set(ids) }), null],
      ['fig-X', 'X', heatmapSvg('X', 'X = E[ids]', r.X, t, r.features, { range, interactive: true }), (i, j) => ({
        lines: [`X[${t[i]}, ${r.features[j]}] = E[${ids[i]}, ${r.features[j]}] = ${fmt(r.X[i][j])}: row ${ids[i]} of E is "${r.tokens[i]}"`],
        marks: [['E', { col: ids[i] }]] })],
      ['fig-P', 'P', p.P ? heatmapSvg('P', 'P, the sinusoidal positions', p.P, t.map((w, i) => `${i}: ${w}`), r.features, { range }) : null, null],
      ['fig-XP', 'XP', p.P ? heatmapSvg('XP', 'X + P', p.XP, t, r.features, { range, interactive: true }) : null, (i, j) => ({
        lines: [`(X+P)[${t[i]}, ${r.features[j]}] = ${fmt(r.X[i][j])} + ${fmt(p.P[i][j])} = ${fmt(p.XP[i][j])}`],
        marks: [['X', { row: i }], ['P', { row: i }]] })],
    ];
    mount('embed', specs);
    for (const id of ids) heatmaps.E.svg.querySelectorAll(`g.cell[data-j="${id}"]`).forEach((g) => g.classList.add('picked-row'));
    document.getElementById('positions-note').textContent = r.positions === 'sinusoidal'
      ? 'P gives each position its own pattern of waves; the queries, keys and values below start from X + P.'
      : r.positions === 'rope' ? 'RoPE leaves X alone: it turns each query and key by its word\'s position (the Q step shows one turning).'
        : 'Without positions, nothing below can tell where a word stands.';
  },
});

defineStep('q', {
  results: ['Q'],
  key: (c) => JSON.stringify([c.t, c.p.XP, c.r.W_Q, c.r.Q, c.r.head, c.r.positions]),
  render(c) {
    const { r, p, t, dcols, rope, sin } = c;
    const range = rangeOf(p.XP, r.W_Q, r.Q, p.Q_pre);
    const xName = sin ? 'X + P' : 'X';
    document.getElementById('q-operand-name').textContent = xName;
    const qHow = (i, j) => ({ lines: projectionLines(c, 'Q', i, j),
      marks: [['X@q', { row: i }], ['W_Q', { col: j }], ['Q_pre', rope ? { row: i } : {}]] });
    const preHow = (i, j) => ({ lines: projectionLines(c, 'Q', i, j).slice(0, 1), marks: [['X@q', { row: i }], ['W_Q', { col: j }]] });
    mount('q', [
      ['fig-q-x', 'X@q', heatmapSvg('X@q', xName, p.XP, t, r.features, { range }), null],
      ['fig-W_Q', 'W_Q', heatmapSvg('W_Q', 'W_Q', r.W_Q, r.features, dcols, { range }), null],
      ['fig-Q_pre', 'Q_pre', rope ? heatmapSvg('Q_pre', 'X W_Q, before RoPE', p.Q_pre, t, dcols, { range, interactive: true }) : null, preHow],
      ['fig-Q', 'Q', heatmapSvg('Q', rope ? 'Q: X W_Q turned by RoPE' : `Q = ${xName.replace(/ /g, '')} W_Q`, r.Q, t, dcols, { range, interactive: true }), qHow],
    ]);
    drawRotation(c, Math.min(2, t.length - 1));
    this.onFill = (k) => { if (rope && k > 0) drawRotation(c, Math.floor((k - 1) / r.d_k)); };
    document.getElementById('wq-story').textContent = weightsStory(c);
  },
});

// RoPE, one query: its first pair before and after the turn, drawn as arrows.
function drawRotation(c, i) {
  const box = document.getElementById('fig-rope');
  if (!c.rope) { box.replaceChildren(); box.hidden = true; return; }
  box.hidden = false;
  const { r, p, t } = c, half = r.d_k / 2;
  const a = [p.Q_pre[i][0], p.Q_pre[i][half]], b = [r.Q[i][0], r.Q[i][half]];
  const R = 56, size = 150, o = size / 2, scale = R / Math.max(1e-9, Math.hypot(a[0], a[1]), Math.hypot(b[0], b[1]));
  const arrow = (v, cls, colour) => `<line class="${cls}" x1="${o}" y1="${o}" x2="${(o + v[0] * scale).toFixed(1)}" y2="${(o - v[1] * scale).toFixed(1)}" stroke="${colour}" stroke-width="3" marker-end="url(#rarr)"/>`;
  const W = 300, H = size + 64;
  box.innerHTML = `<svg class="rope-fig" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="RoPE turning the query of ${esc(t[i])}">` +
    `<defs><marker id="rarr" viewBox="0 0 10 10" refX="8" refY="5" markerWidth="5" markerHeight="5" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="context-stroke"/></marker></defs>` +
    `<text class="muted-text" x="2" y="12">the query of ${esc(t[i])}, its pair (d0, d${half}),</text>` +
    `<text class="muted-text" x="2" y="27">turned by RoPE for position ${i}</text>` +
    `<g transform="translate(0 22)"><circle class="axis" cx="${o}" cy="${o + 4}" r="${R}"/>` +
    `<g transform="translate(0 4)">${arrow(a, 'before', '#1f77b4')}${arrow(b, 'after', '#d62728')}</g></g>` +
    `<text class="muted-text" x="2" y="${size + 40}">blue, X W_Q: (${fmt(a[0])}, ${fmt(a[1])})</text>` +
    `<text class="muted-text" x="2" y="${size + 56}">red, Q: (${fmt(b[0])}, ${fmt(b[1])})</text></svg>`;
}

// What the current W_Q and W_K ask, read from their numbers: for each column,
// the features whose query weight and key weight are largest.
function weightsStory(c) {
  const { r } = c;
  if (r.head.startsWith('random')) return 'These weights are random (seed 2017): no column of W_Q asks anything we could name, so the patterns below are accidents.';
  const top = (W, j) => {
    const col = column(W, j), m = Math.max(...col);
    return m > 0 ? r.features.filter((_, f) => col[f] >= 0.5 * m) : [];
  };
  const cols = r.Q[0].map((_, j) => [j, top(r.W_Q, j), top(r.W_K, j)]).filter(([, q, k]) => q.length && k.length);
  const said = cols.map(([j, q, k]) => `d${j}: a ${q.join(' or ')} asks "${k.join(' or ')}?"`).join('; ');
  return `Read from the wiring (the largest entries of each column of W_Q and W_K): ${said}.` +
    (c.rope ? ' With RoPE the head is wired for word order, and each query and key is also turned by its position, so a question scores differently at different distances.' : '');
}

defineStep('kv', {
  results: ['K', 'V'],
  key: (c) => JSON.stringify([c.s, c.r.K, c.r.V, c.r.W_K, c.r.W_V, c.p.XP, c.r.X_source]),
  render(c) {
    const { r, p, s, dcols, vcols } = c;
    const xin = c.cross ? r.X_source : p.XP;
    const xName = c.cross ? 'X_source' : c.sin ? 'X + P' : 'X';
    const range = rangeOf(xin, r.W_K, r.W_V, r.K, r.V);
    mount('kv', [
      ['fig-kv-x', 'X@kv', heatmapSvg('X@kv', xName, xin, s, r.features, { range }), null],
      ['fig-W_K', 'W_K', heatmapSvg('W_K', 'W_K', r.W_K, r.features, dcols, { range }), null],
      ['fig-W_V', 'W_V', heatmapSvg('W_V', 'W_V', r.W_V, r.features, vcols, { range }), null],
      ['fig-K', 'K', heatmapSvg('K', c.rope ? `K: ${xName.replace(/ /g, '')} W_K turned` : `K = ${xName.replace(/ /g, '')} W_K`, r.K, s, dcols, { range, interactive: true }),
        (i, j) => ({ lines: projectionLines(c, 'K', i, j), marks: [['X@kv', { row: i }], ['W_K', { col: j }]] })],
      ['fig-V', 'V', heatmapSvg('V', `V = ${xName.replace(/ /g, '')} W_V`, r.V, s, vcols, { range, interactive: true }),
        (i, j) => ({ lines: [`V[${s[i]}, ${vcols[j]}] = ${xName.replace(/ /g, '')}[${s[i]}] · W_V[·, ${vcols[j]}] = ` +
          sumText(xin[i].map((x, k) => [x, r.W_V[k][j]]), r.V[i][j])], marks: [['X@kv', { row: i }], ['W_V', { col: j }]] })],
    ]);
    // On a phone the pair being filled is shown (X, W_K, K, then X, W_V, V): all five do not fit in view.
    const kCells = r.K.length * r.K[0].length, fig = document.querySelector('#step-kv .step-figure');
    this.onFill = (k) => { fig.dataset.phase = k > kCells ? 'v' : 'k'; };
  },
});

defineStep('scores', {
  results: ['scores'],
  key: (c) => JSON.stringify([c.t, c.s, c.r.Q, c.r.K, c.r.scores]),
  render(c) {
    const { r, t, s, dcols } = c;
    const range = rangeOf(r.Q, r.K, r.scores);
    mount('scores', [
      ['fig-s-q', 'Q@scores', heatmapSvg('Q@scores', 'Q', r.Q, t, dcols, { range }), null],
      ['fig-KT', 'KT', heatmapSvg('KT', 'Kᵀ: K on its side', transpose(r.K), dcols, s, { range }), null],
      ['fig-scores', 'scores', heatmapSvg('scores', 'Q Kᵀ', r.scores, t, s, { range, interactive: true }), (i, j) => ({
        lines: [`score(${t[i]} → ${s[j]}) = Q[${t[i]}] · K[${s[j]}] = ` + sumText(r.Q[i].map((q, k) => [q, r.K[j][k]]), r.scores[i][j])],
        marks: [['Q@scores', { row: i }], ['KT', { col: j }]] })],
    ]);
    document.getElementById('tied-story').textContent = tiedStory(c);
  },
});

// The asking word the text talks about (the first verb, else the second word)
// and the word it gives its largest weight.
function asker(c) {
  const { r } = c;
  const verb = r.features.indexOf('verb');
  let i = r.tokens.findIndex((_, k) => verb >= 0 && r.X[k][verb] > 0);
  if (i < 0) i = Math.min(1, r.tokens.length - 1);
  const row = r.weights[i];
  const j = row.indexOf(Math.max(...row));
  // The word it looks at most apart from itself: the pair the scores' stories compare.
  const others = row.map((w, k) => (k === i && !r.source_tokens ? -1 : w));
  return { i, j, other: row.length > 1 ? others.indexOf(Math.max(...others)) : j };
}

function tiedStory(c) {
  const { r, t, s } = c;
  const { i, other: j } = asker(c);
  if (c.cross) return `With cross-attention the rows are this sentence's words and the columns the source's: score(${t[i]} → ${s[j]}) = ${fmt(r.scores[i][j])}.`;
  if (i === j) return 'Scores need not be symmetric: a row asks, a column answers.';
  return r.head.includes('tied')
    ? `With one matrix for questions and answers, every score is its own mirror: score(${t[i]} → ${t[j]}) = ${fmt(r.scores[i][j])} and score(${t[j]} → ${t[i]}) = ${fmt(r.scores[j][i])}. Attention can no longer be one-sided.`
    : `Scores need not be symmetric: score(${t[i]} → ${t[j]}) = ${fmt(r.scores[i][j])}, but score(${t[j]} → ${t[i]}) = ${fmt(r.scores[j][i])}. ` +
      // "Barely looks back" only of a pair that does: not of 0.091 against 0.227, nor 7.804 against 5.634.
      (r.scores[i][j] > 0 && Math.abs(r.scores[j][i]) < r.scores[i][j] / 4 ? 'A word can look hard at another that barely looks back.'
        : 'Each direction is one word\'s query against the other\'s key, and W_Q and W_K make them differently.');
}

defineStep('scaled', {
  results: ['scaled'],
  key: (c) => JSON.stringify([c.t, c.s, c.r.scores, c.r.scaled, c.r.scale]),
  render(c) {
    const { r, t, s } = c;
    const range = rangeOf(r.scores, r.scaled);
    const title = state.noScale ? 'Q Kᵀ, not divided' : state.scaleByModel ? 'Q Kᵀ / √d_model (the slip)' : 'Q Kᵀ / √d_k';
    mount('scaled', [
      ['fig-sc-scores', 'scores@scaled', heatmapSvg('scores@scaled', 'Q Kᵀ', r.scores, t, s, { range }), null],
      ['fig-scaled', 'scaled', heatmapSvg('scaled', r.causal ? `${title}, future masked` : title, r.scaled, t, s, { range, interactive: true }),
        (i, j) => ({ lines: [r.scaled[i][j] === null
          ? `scaled[${t[i]} → ${s[j]}] = -inf: the causal mask hides ${s[j]}, which comes after ${t[i]}`
          : `scaled[${t[i]} → ${s[j]}] = score × scale = ${fmt(r.scores[i][j])}×${fmt(r.scale)} = ${fmt(r.scaled[i][j])}`],
        marks: [['scores@scaled', { row: i }]] })],
    ]);
    // What the two other choices do, and why they are wrong. A smaller factor on every
    // score flattens every row of the softmax (its largest weight falls), a larger sharpens it.
    const dk = r.d_k, dm = r.d_model;
    document.getElementById('scale-note').textContent = state.noScale
      ? `Not divided: every score is √d_k = ${fmt(Math.sqrt(dk))} times what the paper uses, so the softmax's rows come out sharper than they should.`
      : state.scaleByModel
        ? `The slip: dividing by √d_model = √${dm} ≈ ${fmt(Math.sqrt(dm))} rather than by √d_k = √${dk} = ${fmt(Math.sqrt(dk))}. The dot products are of queries and keys of d_k = ${dk} numbers, not of X's ${dm}, so every score comes out ${fmt(Math.sqrt(dk / dm))} times what it should be and the softmax's rows flatter. With the paper's d_model = 512 and heads of d_k = 64, that is a division by 22.6 instead of 8.`
        : '';
  },
});

defineStep('weights', {
  results: ['weights'],
  key: (c) => JSON.stringify([c.t, c.s, c.r.scaled, c.r.weights, c.p.row_sums]),
  render(c) {
    const { r, p, t, s } = c;
    const masked = r.causal ? (i, j) => j > i : null;
    mount('weights', [
      ['fig-w-scaled', 'scaled@weights', heatmapSvg('scaled@weights', `scaled scores (colours to ±${fmt(rangeOf(r.scaled))})`, r.scaled, t, s, {}), null],
      ['fig-weights', 'weights', heatmapSvg('weights', r.causal ? 'softmax, row by row (· masked)' : 'softmax, row by row', r.weights, t, s,
        { rowSums: p.row_sums, rowButtons: true, masked, interactive: true, range: 1 }), (i, j) => {
        showBars(c, i);
        return { lines: [masked && masked(i, j)
          ? `weights[${t[i]} → ${s[j]}] = 0: masked, ${s[j]} comes later`
          : `weights[${t[i]} → ${s[j]}] = ${fmt(r.weights[i][j])}: ${t[i]} gives ${s[j]} ${(100 * r.weights[i][j]).toFixed(1)}% of its attention; its row adds up to ${fmt(p.row_sums[i])}`],
        marks: [['scaled@weights', { row: i }]] };
      }],
    ]);
    // A row's sum shows once its last cell has filled.
    const m = s.length, svg = heatmaps.weights.svg;
    this.onFill = (k) => svg.querySelectorAll('.row-sum').forEach((el, i) => el.classList.toggle('pending', k < (i + 1) * m));
    this.onFill(reducedMotion.matches ? t.length * m : 0);
    document.getElementById('bars').replaceChildren();
    document.getElementById('weights-story').textContent = weightsNow(c);
  },
});

// What the current weights show, from their numbers.
function weightsNow(c) {
  const { r, t, s } = c;
  const { i, j } = asker(c);
  const row = r.weights[i], best = row[j];
  const ties = row.map((w, k) => (Math.abs(w - best) < 1e-9 ? s[k] : null)).filter((x) => x);
  const flat = Math.max(...row) - Math.min(...row.filter((_, k) => !(r.causal && k > i))) < 0.05;
  let text = ties.length > 1
    ? `Look at ${t[i]}: its largest weight, ${pct(best)}, is a tie between ${ties.join(' and ')}.`
    : `Look at ${t[i]}: its largest weight, ${pct(best)}, goes to ${s[j]}.`;
  // Two different words with the same row of X get the same key: without
  // positions no head can prefer one, which is why word order has to be added.
  const xsKeys = c.cross ? r.X_source : r.X, words = c.cross ? r.source_tokens : r.tokens;
  const tiedAt = row.map((w, k) => (Math.abs(w - best) < 1e-9 ? k : -1)).filter((k) => k >= 0);
  const twins = tiedAt.filter((k) => words[k] !== words[tiedAt[0]] && xsKeys[k].every((x, f) => x === xsKeys[tiedAt[0]][f]));
  if (r.positions === 'none' && twins.length)
    text += ` ${s[tiedAt[0]]} and ${s[twins[0]]} are different words with the same row of X, so they get the same key: without positions no head can tell them apart. Choose RoPE under positions and each word finds its own.`;
  if (flat) text += ' Its row is almost flat: this head asks nothing of it in particular.';
  const animal = r.features.indexOf('animal');
  const xs = c.cross ? r.X_source : r.X;
  if (ties.length === 1 && !flat && r.head.startsWith('wired') && animal >= 0 && xs[j][animal] > 0 && r.X[i][r.features.indexOf('verb')] > 0)
    text += ' The verb found its animal: who did it.';
  const tops = r.weights.map((w, a) => {
    const m = Math.max(...w), at = w.map((x, k) => (Math.abs(x - m) < 1e-9 ? s[k] : null)).filter((x) => x);
    return `${t[a]} → ${at.join(' and ')} ${pct(m)}`; // a tie names every word that has the largest weight
  });
  return `${text} Every row's largest weight: ${tops.join(', ')}.`;
}

function showBars(c, i) {
  const { r, t, s } = c;
  const box = document.getElementById('bars');
  const rows = r.weights[i].map((w, j) => {
    const div = document.createElement('div');
    div.className = 'bar-row';
    const name = Object.assign(document.createElement('span'), { textContent: s[j] });
    const bar = Object.assign(document.createElement('span'), { className: 'bar' });
    bar.style.width = `${Math.round(w * 200)}px`;
    const share = Object.assign(document.createElement('span'), { textContent: `${(100 * w).toFixed(1)}%` });
    div.append(name, bar, share);
    return div;
  });
  box.replaceChildren(Object.assign(document.createElement('p'), { textContent: `How "${t[i]}" splits its attention:` }), ...rows);
}

// What a row of weights makes of the values, in words that follow its numbers
// as the figure shows them (3 decimals, fmt): a tie is weights that show alike
// (0.5004 and 0.4996 both show 0.500); "the rest" only where another word's
// weight shows above 0.000 (not for a causal row's first word, which takes all
// of itself, nor for a tie that takes everything); "mostly" only where the
// largest is over 50% in the sentence's whole percents (0.502 says 50%).
function outputBlend(row, s) {
  const shown = (w) => Number((100 * w).toFixed(0));
  const best = Math.max(...row), j = row.indexOf(best), tie = (w) => fmt(w) === fmt(best);
  const ties = s.filter((_, k) => tie(row[k]));
  const rest = row.some((w) => !tie(w) && fmt(w) !== fmt(0));
  if (ties.length > 1) {
    return rest ? `takes equal largest parts from the values of ${ties.join(' and ')} (weight ${pct(best)} each), and the rest from the other words`
      : `is an equal blend of the values of ${ties.join(' and ')} (weight ${pct(best)} each)`;
  }
  if (!rest) return `is the value of ${s[j]} (weight ${pct(best)})`;
  return shown(best) > 50 ? `is mostly the value of ${s[j]} (weight ${pct(best)}), plus a little of everything else`
    : `takes its largest part from the value of ${s[j]} (weight ${pct(best)}), and the rest from the other words`;
}

defineStep('output', {
  results: ['output'],
  key: (c) => JSON.stringify([c.t, c.s, c.r.weights, c.r.V, c.r.output]),
  render(c) {
    const { r, t, s, vcols } = c;
    const range = rangeOf(r.V, r.output, r.weights);
    mount('output', [
      ['fig-o-weights', 'weights@output', heatmapSvg('weights@output', 'weights', r.weights, t, s, { range }), null],
      ['fig-o-V', 'V@output', heatmapSvg('V@output', 'V', r.V, s, vcols, { range }), null],
      ['fig-output', 'output', heatmapSvg('output', 'output = weights V', r.output, t, vcols, { range, interactive: true }), (i, j) => ({
        lines: [`output[${t[i]}, ${vcols[j]}] = weights[${t[i]}] · V[·, ${vcols[j]}] = ` + sumText(r.weights[i].map((w, k) => [w, r.V[k][j]]), r.output[i][j])],
        marks: [['weights@output', { row: i }], ['V@output', { col: j }]] })],
    ]);
    const { i } = asker(c);
    document.getElementById('output-story').textContent =
      `So the new vector for ${t[i]} ${outputBlend(r.weights[i], s)}. Each word has gathered information from the words that matter to it.`;
  },
});

defineStep('lines', {
  key: (c) => JSON.stringify([c.t, c.s, c.r.weights, state.heads, state.heads === 2 ? [c.r.head, state.causal, state.noScale, state.positions, state.tied, state.source, state.scaleByModel] : 0]),
  render(c) {
    const { r, t, s } = c;
    const n = t.length, m = s.length, rowH = 26, lw = 10 + 7.5 * Math.max(...t.map((w) => w.length));
    const width = Math.max(320, lw + 260), height = 20 + Math.max(n, m) * rowH, x1 = lw + 8, x2 = width - 90;
    const out = [`<svg class="lines" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="group" aria-label="attention lines: words asking on the left, words asked on the right"><g class="lines-g"></g>`];
    const rowLines = (i) => {
      const o = [];
      for (let j = 0; j < m; j++) {
        const w = r.weights[i][j];
        if (w > 0) o.push(`<line class="cell${reducedMotion.matches ? '' : ' empty'}" data-filled="${reducedMotion.matches ? 1 : 0}" x1="${x1}" y1="${20 + i * rowH}" x2="${x2}" y2="${20 + j * rowH}" stroke="#d62728" stroke-width="${(0.5 + 10 * w).toFixed(2)}" stroke-opacity="${(0.15 + 0.85 * w).toFixed(2)}" data-i="${i}" data-j="${j}"/>`);
      }
      return o.join('');
    };
    t.forEach((tok, i) => out.push(`<text class="word" x="${x1 - 6}" y="${24 + i * rowH}" text-anchor="end" tabindex="0" role="button" aria-label="${esc(tok)}: show only its lines" data-i="${i}">${esc(tok)}</text>`));
    s.forEach((tok, j) => out.push(`<text class="word-right" x="${x2 + 6}" y="${24 + j * rowH}">${esc(tok)}</text>`));
    out.push('</svg>');
    const box = document.getElementById('fig-lines');
    box.innerHTML = `<p class="scroll-hint">&larr; scroll sideways for the rest &rarr;</p><div class="scroll">${out.join('')}</div>`;
    const g = box.querySelector('g.lines-g');
    // This drawing's cells and what a filled one writes, set before its first
    // rows are added: refreshCells calls them on those rows at once, and the
    // previous drawing's handler would read its own sentence's weights there.
    this.collect = () => [...box.querySelectorAll('line.cell')];
    this.onFill = (k) => {
      const l = this.cells[k - 1];
      writeSum('lines', [l ? `${t[+l.dataset.i]} → ${s[+l.dataset.j]}: ${(100 * r.weights[+l.dataset.i][+l.dataset.j]).toFixed(1)}%` : '']);
    };
    const per = Math.max(1, Math.floor(CHUNK_CELLS / m));
    const drawn = box.firstElementChild;
    for (let a = 0; a < n; a += per) {
      const add = () => {
        if (box.firstElementChild !== drawn) return; // redrawn since
        const o = [];
        for (let i = a; i < Math.min(n, a + per); i++) o.push(rowLines(i));
        g.insertAdjacentHTML('beforeend', o.join(''));
        refreshCells('lines');
      };
      if (a === 0) add(); else queueJob(add);
    }
    const lines = { forEach: (f) => this.collect().forEach(f) };
    const isolate = (i) => lines.forEach((l) => l.classList.toggle('dimmed', i !== null && +l.dataset.i !== i));
    for (const word of box.querySelectorAll('text.word')) {
      const i = +word.dataset.i;
      word.addEventListener('mouseenter', () => isolate(i));
      word.addEventListener('focus', () => isolate(i));
      word.addEventListener('mouseleave', () => isolate(null));
      word.addEventListener('blur', () => isolate(null));
    }
    this.cells = this.collect();
    document.getElementById('lines-story').textContent = r.head.startsWith('random')
      ? 'With random weights there is no pattern to find: the lines go wherever the accidents of the numbers send them.'
      : `Adjectives find their nouns, verbs find animals, prepositions find things.${patternsMissed(c)} In a trained model nobody wires this by hand: it is learned from data, and some heads really do learn patterns like these.`;
    renderHeads(c);
  },
});

// The wired head's patterns that this figure does not show: a word of the asking
// kind whose largest weight goes elsewhere though a word it looks for is there
// to be seen (the positions added to X, the mask or the tie can move it).
const PATTERNS = [['adjective', ['noun']], ['verb', ['animal']], ['preposition', ['thing', 'place']]];
function patternsMissed(c) {
  const { r, t, s } = c;
  const xs = c.cross ? r.X_source : r.X, f = (name) => r.features.indexOf(name);
  const missed = [];
  for (const [kind, wants] of PATTERNS) {
    if (f(kind) < 0 || wants.some((w) => f(w) < 0)) continue;
    const found = (j) => wants.some((w) => xs[j][f(w)] > 0);
    r.weights.forEach((row, i) => {
      if (!(r.X[i][f(kind)] > 0)) return;
      const seen = row.map((w, j) => j).filter((j) => !(r.causal && j > i));
      if (!seen.some(found)) return; // nothing it looks for in its view
      const best = Math.max(...row), top = row.map((w, j) => (Math.abs(w - best) < 1e-9 ? j : -1)).filter((j) => j >= 0);
      if (!top.every(found)) missed.push(`${t[i]} → ${top.map((j) => s[j]).join(' and ')} ${pct(best)}`);
    });
  }
  if (!missed.length) return '';
  const why = [r.positions === 'sinusoidal' ? 'the positions added to X change the features the head was wired to read' : '',
    r.head.includes('tied') ? 'with one matrix a word\'s query is its key, which the wiring did not intend' : ''].filter((x) => x);
  return ` Not all of them in this figure: ${missed.join(', ')}${why.length ? `, because ${why.join(', and ')}` : ''}.`;
}

// ---- two heads at once --------------------------------------------------------------------

// The first head is the page's head (wired or random, with every toggle);
// the second asks "where?". Their concat and concat · W_O come from the
// library (web_heads), as `attn explain --heads 2`.
function renderHeads(c) {
  const section = document.getElementById('step-heads'), figs = document.getElementById('heads-figs');
  section.hidden = figs.hidden = state.heads !== 2;
  document.body.dataset.heads = String(state.heads);
  if (state.heads !== 2) { window.attnHeads = null; return; }
  const { r, t, s } = c;
  const h2 = explain(state, 'where');
  if (h2.error) return;
  const kind = (h) => (h.head.startsWith('random') ? 1 : h.head.includes('word order') ? 3 : h.head.startsWith('where') ? 2 : 0);
  const both = withC([r.output, h2.output], (o1, o2) => lib.web_heads(t.length, o1, o2, kind(r), 2));
  const cols = [...r.value_features.map((f, j) => `1:${f || 'v' + j}`), ...h2.value_features.map((f, j) => `2:${f || 'v' + j}`)];
  const first = r.head.startsWith('random') ? 'random: no question in particular' : 'wired: who did it?';
  document.getElementById('head1-name').textContent = first;
  const range = rangeOf(both.concat, both.output);
  mount('lines', [
    ['fig-head1', 'head1', heatmapSvg('head1', `head 1, ${first}`, r.weights, t, s, { rowSums: state.parts.row_sums, range: 1 }), null],
    ['fig-head2', 'head2', heatmapSvg('head2', 'head 2, where?', h2.weights, t, s, { rowSums: parts(h2).row_sums, range: 1 }), null],
    ['fig-concat', 'concat', heatmapSvg('concat', 'concat: both heads\' outputs', both.concat, t, cols, { range }), null],
    ['fig-heads-out', 'heads-output', heatmapSvg('heads-output', 'concat · W_O: back into the features', both.output, t, r.features,
      { range, interactive: true }), (i, j) => ({
      lines: [`out[${t[i]}, ${r.features[j]}] = concat[${t[i]}] · W_O[·, ${r.features[j]}] = ` +
        sumText(both.concat[i].map((x, k) => [x, both.W_O[k][j]]), both.output[i][j])],
      marks: [['concat', { row: i }]] })],
  ]);
  window.attnHeads = { heads: [r, h2], concat: both.concat, W_O: both.W_O, output: both.output };
}

// ---- playing a step: the scroll, the buttons, the keys ----------------------------------

const reducedMotion = matchMedia('(prefers-reduced-motion: reduce)');

// Fill the first k cells of a step (in row order); the newest is explained.
function setFill(step, k) {
  const cells = step.cells, total = cells.length;
  if (reducedMotion.matches) k = total;
  k = Math.max(0, Math.min(total, k));
  if (k === step.filled) return;
  const from = Math.min(k, step.filled), to = Math.max(k, step.filled); // the cells past step.filled are empty
  for (let x = from; x < to; x++) {
    const on = x < k;
    cells[x].classList.toggle('empty', !on);
    cells[x].dataset.filled = on ? '1' : '0';
  }
  step.filled = k;
  const fig = document.querySelector(`#step-${step.id} .step-figure`);
  fig.dataset.filled = String(k);
  const count = fig.querySelector('.fill-count');
  if (count) count.textContent = `${k} of ${total}`;
  if (step.onFill) step.onFill(k);
  const last = cells[k - 1];
  if (k > 0 && last && last.closest('svg.heatmap')) showCell(last.closest('svg.heatmap').dataset.name, +last.dataset.i, +last.dataset.j);
  else if (k === 0) { clearHighlights(step.id); writeSum(step.id, []); }
}

// The scroll position inside a step, 0 at its start to 1 at its end.
function progressOf(section) {
  const rect = section.getBoundingClientRect(), span = rect.height - innerHeight;
  return span > 0 ? Math.max(0, Math.min(1, -rect.top / span)) : rect.top < 0 ? 1 : 0;
}

let playing = null; // {step, timer}
function stopPlaying() {
  if (!playing) return;
  clearInterval(playing.timer);
  const b = document.querySelector(`#step-${playing.step.id} .play`);
  if (b) { b.textContent = '▶ play'; b.setAttribute('aria-pressed', 'false'); }
  playing = null;
  if (sayStep) sayNow(); // the step settled: say where it stopped
}
function play(step) {
  if (playing && playing.step === step) return stopPlaying();
  stopPlaying();
  if (step.filled >= step.cells.length) setFill(step, 0);
  const b = document.querySelector(`#step-${step.id} .play`);
  b.textContent = '⏸ pause';
  b.setAttribute('aria-pressed', 'true');
  const every = Math.max(30, Math.min(400, 5000 / Math.max(1, step.cells.length)));
  playing = { step, timer: setInterval(() => {
    if (step.filled >= step.cells.length) return stopPlaying();
    setFill(step, step.filled + 1);
  }, every) };
}

let currentStep = null;
let lastScrollY = -1;
function onScroll() {
  // Nothing to draw before the first sentence is: a page opened at a contents link, or
  // reloaded where the reader was, scrolls before main's first update, and drawing a step
  // then threw (no result). main's own onScroll, after that update, draws what is in view.
  if (!state.result) return;
  const y = scrollY;
  const moved = y !== lastScrollY;
  lastScrollY = y;
  const doc = document.scrollingElement;
  document.getElementById('progress-bar').style.width = `${(100 * y / Math.max(1, doc.scrollHeight - innerHeight)).toFixed(1)}%`;
  let best = null;
  // Reads first (every step's place), then the writes.
  const seen = Object.values(steps).map((step) => {
    const sec = document.getElementById(`step-${step.id}`), rect = sec.getBoundingClientRect();
    const near = !(rect.bottom <= innerHeight * 0.3 || rect.top >= innerHeight * 0.7);
    return [step, sec, near, near ? progressOf(sec) : 0, rect.bottom > 0 && rect.top < innerHeight];
  });
  for (const [step, sec, near, at, inView] of seen) {
    if (!inView && step.sizeHeld) releaseStep(step); // gone from the view: the sums it kept the size of too
    if (inView) step.sizeHeld = true;
    if (inView && (step.dirty || !step.overflowMarked)) {
      // A step whose numbers are still to compute waits for its jobs (queueStep: they are
      // waiting, unless its render threw and it is tried again), so that the scroll makes no long task.
      if (step.dirty && step.prepare && step.prepare().some((j) => j.alone())) queueStep(step);
      else if (step.dirty) renderStep(step);
      else { needFill.add(step); if (!fillFrame) fillFrame = requestAnimationFrame(fillDrawn); }
    }
    // Every step in view shows where the scroll is in it: a jump (a contents link, Home, a fast
    // flick) can land with a step's top low in the view, past the band that makes it current,
    // and it must show empty there, not the fill it had when the scroll left it.
    if (inView && !near && moved && !(playing && playing.step === step) && !step.dirty) setFill(step, Math.round(progressOf(sec) * step.cells.length));
    if (!near) continue;
    best = step;
    if (moved && !(playing && playing.step === step) && !step.dirty) setFill(step, Math.round(at * step.cells.length));
  }
  if (best !== currentStep) { currentStep = best; }
  markToc();
}

// A phone pins a step's figure over the top of the view, and the browser, bringing a
// focused control into view, does not know it: a control near the top sat under the
// figure. The figure may also grow after the focus lands, when the scroll brings its
// step in and draws it. So for the next 20 frames (a third of a second) the page keeps
// the focused control clear of its step's pinned figure (WCAG 2.4.11, focus not obscured).
// And after them, whenever a box that can move the control changes size while the scroll
// is still where the page left it: a drawing can land later than 20 frames (the score
// histograms come from the worker, which a busy machine slows) and push the control out
// of the view below it. The body's size alone did not tell: beside a wide screen's figure
// a step is at least 230vh tall, so the histograms growing above the link after them
// moved the link out of the view and the body kept its height. What moves the control is
// a box before it that changes size, inside a container of it (a container of fixed size
// moves nothing outside it): a child of one of its containers, the pinned figure included.
// Not a control focused by a press of the mouse or a finger: it was in view, under the
// pointer, and scrolling it while the button was down moved it from under the pointer,
// so the release landed elsewhere and the click was lost (a box pressed at the view's
// top edge did not get checked). And not once the reader has scrolled the control out
// of the view (to the next control, say): the page pulled them back to the one they had
// left, as long as frames remained (longer on a busy machine). After the 20 frames, any
// scroll of the reader's ends it. A control that the drawing pushed out of the view, the
// scroll where the page left it, is still brought back.
let pointerDown = false;
addEventListener('pointerdown', () => { pointerDown = true; }, true);
for (const ev of ['pointerup', 'pointercancel']) addEventListener(ev, () => { pointerDown = false; }, true);
let kept = null; // the control kept clear: { el, frames: checks left on every frame, at: scrollY as the last check left it }
let layoutWatch = null; // the boxes that can move the kept control (watchAround), while there is one
function keepFocusClear(el) {
  dropKept();
  if (!(el instanceof Element) || el.closest('.step-figure') || pointerDown) return;
  const k = kept = { el, frames: 20, at: null };
  watchAround(el);
  const check = () => { if (kept === k && keepClear() && --k.frames > 0) requestAnimationFrame(check); };
  requestAnimationFrame(check);
}
// One check of the kept control: false once it is kept no longer.
function keepClear() {
  const { el, at } = kept;
  const r = el.getBoundingClientRect();
  const away = at !== null && scrollY !== at && (kept.frames === 0 || r.bottom <= 0 || r.top >= innerHeight); // the reader scrolled
  if (document.activeElement !== el || away) { dropKept(); return false; }
  clearOfFigure(el);
  kept.at = scrollY;
  return true;
}
// The children of each container of el up to the body, and the body: every box whose
// size can move el, fifty or sixty. The ones after el too: on a phone a step's figure, pinned
// above its text, comes after the text in the page's order.
function watchAround(el) {
  if (!layoutWatch) layoutWatch = new ResizeObserver(() => { if (kept) keepClear(); });
  for (let box = el; box.parentElement && box !== document.body; box = box.parentElement)
    for (const child of box.parentElement.children) layoutWatch.observe(child, { box: 'border-box' });
  layoutWatch.observe(document.body);
}
function dropKept() {
  kept = null;
  if (layoutWatch) layoutWatch.disconnect();
}
function clearOfFigure(el) {
  if (document.activeElement !== el) return;
  const r = el.getBoundingClientRect();
  const fig = el.closest('.step') && el.closest('.step').querySelector('.step-figure');
  const f = fig && fig.getBoundingClientRect();
  // The figure covers the view's top where it is stuck there and spans the control's column.
  const under = f && f.top < 40 && f.bottom > 0 && f.left < r.right && f.right > r.left ? f.bottom : 0;
  const room = innerHeight - under;
  if (r.top < under + 4) scrollBy({ top: r.top - under - Math.max(8, (room - r.height) / 3), behavior: 'instant' });
  else if (r.bottom > innerHeight) scrollBy({ top: r.bottom - innerHeight + 8, behavior: 'instant' });
}

// The contents: the section being read is marked, the ones above it done.
let tocLinks = null;
function markToc() {
  if (!tocLinks) tocLinks = [...document.querySelectorAll('#toc a')].map((a) => [a, document.getElementById(a.hash.slice(1))]);
  let current = null;
  for (const [a, target] of tocLinks) if (target && target.getBoundingClientRect().top < innerHeight * 0.5) current = a;
  for (const [a, target] of tocLinks) {
    a.toggleAttribute('aria-current', a === current);
    if (a === current) a.setAttribute('aria-current', 'true');
    a.classList.toggle('done', !!target && target.getBoundingClientRect().bottom < 0);
  }
}

// Each step's figure gets its player and its colour legend.
function addPlayers() {
  for (const step of Object.values(steps)) {
    const fig = document.querySelector(`#step-${step.id} .step-figure`);
    const head = document.createElement('div');
    head.className = 'fig-head';
    head.innerHTML = `<div class="player" role="group" aria-label="play this step">` +
      `<button type="button" class="back">◀ back</button>` +
      `<button type="button" class="play" aria-pressed="false">▶ play</button>` +
      `<button type="button" class="fwd">step ▶</button>` +
      `<span class="fill-count"></span></div><div class="legend-box"></div>`;
    fig.prepend(head);
    holdSize(head.querySelector('.fill-count'));
    head.querySelector('.back').addEventListener('click', () => { stopPlaying(); setFill(step, step.filled - 1); if (sayStep) sayNow(); });
    head.querySelector('.fwd').addEventListener('click', () => { stopPlaying(); setFill(step, step.filled + 1); if (sayStep) sayNow(); });
    head.querySelector('.play').addEventListener('click', () => play(step));
  }
  document.querySelectorAll('.sum').forEach(holdSize);
}

// One legend per figure: its scale, from the figure's largest |number|.
function legend(step, range, note) {
  const box = document.querySelector(`#step-${step} .legend-box`);
  if (!box) return;
  const lo = shade(-1).fill, mid = shade(0).fill, hi = shade(1).fill;
  box.innerHTML = `<div class="legend" title="one colour scale for ${esc(note)}"><span>${range === 1 ? '−1' : fmt(-range)}</span>` +
    `<span class="ramp" style="background: linear-gradient(to right, ${lo}, ${mid}, ${hi})"></span>` +
    `<span>${range === 1 ? '+1' : `+${fmt(range)}`}</span><span>red &gt; 0, blue &lt; 0; one scale for ${note}</span></div>`;
}

const LEGEND_OF = {
  embed: (c) => rangeOf(embedding(), c.r.X, c.p.P, c.p.XP), q: (c) => rangeOf(c.p.XP, c.r.W_Q, c.r.Q, c.p.Q_pre),
  kv: (c) => rangeOf(c.cross ? c.r.X_source : c.p.XP, c.r.W_K, c.r.W_V, c.r.K, c.r.V),
  scores: (c) => rangeOf(c.r.Q, c.r.K, c.r.scores), scaled: (c) => rangeOf(c.r.scores, c.r.scaled),
  weights: () => 1, output: (c) => rangeOf(c.r.V, c.r.output, c.r.weights),
};

function renderStep(step) {
  const c = ctx();
  drawingResults = new Set(step.results || []);
  writeSum(step.id, []); // a sum of the matrices before is not true of these
  releaseStep(step); // nor is the size its sums had
  step.render(c);
  drawingResults = new Set();
  // The cells in the order the scroll fills them: the step's own order, or its results' cells row by row.
  if (step.collect) step.cells = step.collect();
  else if (step.results) step.cells = step.results.flatMap((n) => (heatmaps[n] ? heatmaps[n].cells.flat() : []));
  step.dirty = false;
  step.filled = reducedMotion.matches ? step.cells.length : 0; // as drawn
  if (LEGEND_OF[step.id]) legend(step.id, LEGEND_OF[step.id](c), step.id === 'weights' ? 'the weights' : 'this figure');
  // Its fill and its scroll hints need the layout: read it once, in the next frame, for all steps drawn.
  needFill.add(step);
  if (!fillFrame) fillFrame = requestAnimationFrame(fillDrawn);
}

const needFill = new Set();
let fillFrame = 0;
function fillDrawn() {
  fillFrame = 0;
  const todo = [...needFill];
  needFill.clear();
  // Read the layout first (the steps in view only: reading inside a step out of
  // view would lay it out), then write, so the layout is computed once.
  const at = todo.map((step) => {
    const sec = document.getElementById(`step-${step.id}`), r = sec.getBoundingClientRect();
    const inView = r.bottom > 0 && r.top < innerHeight;
    return [step, sec, inView ? Math.round(progressOf(sec) * step.cells.length) : 0, inView ? overflowing(sec) : null];
  });
  for (const [step, sec, k, over] of at) {
    setFill(step, k);
    if (over) { over.forEach(([el, o]) => { el.dataset.overflow = o; markScroller(el, o === '1'); }); step.overflowMarked = true; } else step.overflowMarked = false;
  }
}

// After a change: the steps whose inputs changed are redrawn, the visible
// ones at once and the rest one per task, so no task runs long.
function scheduleSteps() {
  const c = ctx();
  const changed = [];
  for (const step of Object.values(steps)) {
    const key = step.key(c);
    if (key !== step.lastKey) { step.lastKey = key; step.dirty = true; changed.push(step); }
  }
  const visible = (s) => { const r = document.getElementById(`step-${s.id}`).getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; };
  // The changed steps first, those in view first, each in a task of its own; then
  // the jobs that were waiting, none dropped (see queueJob): the rows still to draw
  // of a heatmap whose step did not change, the renders of steps made dirty by an
  // earlier change, the kernel's walk for controls set just before.
  const waiting = jobs.splice(0);
  for (const s of [...changed.filter(visible), ...changed.filter((x) => !visible(x))]) queueStep(s);
  waiting.forEach(queueJob);
  jobsChanged();
}
// A step's render as a job, after the jobs that compute what it draws (its prepare).
function queueStep(s) {
  if (jobs.includes(s.job)) return; // already waiting, after its prepare
  if (s.prepare) s.prepare().forEach(queueJob);
  queueJob(s.job);
}

// ---- the sentence, the error, the update loop ---------------------------------------------

function setError(kind, text) {
  const error = document.getElementById('error');
  error.dataset.kind = kind;
  error.textContent = text;
}

function markWord(sentence, result) {
  const bytes = new TextEncoder().encode(sentence), dec = new TextDecoder();
  const word = dec.decode(bytes.subarray(result.start, result.start + result.length));
  const mark = Object.assign(document.createElement('mark'), { textContent: word });
  document.getElementById('mirror').replaceChildren(document.createTextNode(dec.decode(bytes.subarray(0, result.start))), mark,
    document.createTextNode(dec.decode(bytes.subarray(result.start + result.length))));
  return { word, atEnd: result.start + result.length === bytes.length };
}

function unknownText(word, suggestion) {
  // At most 40 characters of it, as the command quotes: a pasted run of letters would fill the screen.
  const chars = [...word];
  if (chars.length > 40) word = chars.slice(0, 40).join('') + '…';
  return suggestion ? `"${word}" is not in the toy vocabulary. Did you mean "${suggestion}"?`
    : `"${word}" is not in the toy vocabulary, which knows: ${vocab().words.join(' ')}.`;
}

// The error of a source sentence (web_explain's "the source: ..."), said as
// the sentence's own: its unknown word, and one suggestion.
function sourceErrorText(source, r) {
  if (r.start < 0) return `${r.error.replace(/^the source: the sentence/, 'The source sentence')}.`;
  return `The source sentence: ${unknownText(wordAt(source, r), r.suggestion)}`;
}

// The unknown word of an error r in text (its start and length count bytes of UTF-8).
function wordAt(text, r) {
  return new TextDecoder().decode(new TextEncoder().encode(text).subarray(r.start, r.start + r.length));
}

// The nearest sentence the toy knows: each unknown word replaced by its
// closest known word, or dropped when none is close.
function nearestSentence(sentence) {
  let s = sentence;
  for (let k = 0; k < 70; k++) {
    const r = explain({ ...state, sentence: s, source: '' });
    if (!r.error) return s;
    if (r.start < 0) return DEFAULT_SENTENCE;
    const bytes = new TextEncoder().encode(s), dec = new TextDecoder();
    s = (dec.decode(bytes.subarray(0, r.start)) + (r.suggestion || '') + dec.decode(bytes.subarray(r.start + r.length))).replace(/\s+/g, ' ').trim();
    if (!s) return DEFAULT_SENTENCE;
  }
  return DEFAULT_SENTENCE;
}

// Controls that cannot go together: a learner's sentence, and the controls
// set so that what they show is what runs.
function reconcile() {
  const causalBox = document.getElementById('causal'), sinus = document.querySelector('#positions option[value=sinusoidal]');
  const cross = !!state.source;
  const notes = [];
  if (cross && state.causal) { state.causal = false; notes.push('causal'); }
  if (cross && state.positions === 'sinusoidal') { state.positions = 'none'; notes.push('sinusoidal'); }
  causalBox.disabled = cross;
  causalBox.checked = state.causal;
  sinus.disabled = cross;
  document.getElementById('positions').value = state.positions;
  document.getElementById('causal-note').textContent = cross
    ? 'The causal mask is off while keys come from another sentence: a mask says "only the words before me", and the two sentences share no order, so every word may see every source word.'
    : '';
  document.getElementById('source-note').textContent = cross
    ? 'Keys and values now come from the source sentence; the queries still come from the sentence at the top.' +
      (notes.length ? ` (${notes.includes('causal') ? 'The causal mask' : 'Sinusoidal positions'} went off: ${notes.includes('causal') ? 'the two sentences share no order.' : 'they would add one sentence\'s positions to the other\'s.'})` : '')
    : '';
}

let typingTimer = null, typedFrom = null; // a keystroke waiting out its pause, and the sentence before it

// typing: true when the change came from a keystroke in the sentence box.
function update(typing = false) {
  // Any other change supersedes a keystroke still waiting out its pause (the box's text is read now).
  if (!typing && typingTimer) {
    clearTimeout(typingTimer);
    typingTimer = null;
    if (state.sentence === typedFrom) state.sentence = document.getElementById('sentence').value;
  }
  try {
    reconcile();
    const r = explain(state);
    writeFragment();
    document.getElementById('shuffle-note').textContent = '';
    const input = document.getElementById('sentence');
    if (r.error) {
      if (/^the source/.test(r.error)) {
        setError('error', sourceErrorText(state.source, r));
        if (state.result) document.body.dataset.stale = '1';
        return;
      }
      if (r.start >= 0) {
        const { word, atEnd } = markWord(state.sentence, r);
        const lower = word.toLowerCase();
        if (typing && atEnd && vocab().words.some((w) => w.startsWith(lower))) {
          // A word still being typed: say so, keep the last sentence's figures as they are.
          const could = vocab().words.filter((w) => w.startsWith(lower)).slice(0, 4);
          input.removeAttribute('aria-invalid');
          setError('typing', `keep typing: "${word}" could become ${could.join(', ')}…`);
          return;
        }
        input.setAttribute('aria-invalid', 'true');
        setError('error', unknownText(word, r.suggestion));
      } else {
        input.setAttribute('aria-invalid', 'true');
        document.getElementById('mirror').textContent = '';
        setError('error', r.error.replace(/^the sentence/, 'The sentence') + '.');
      }
      if (state.result) {
        document.body.dataset.stale = '1';
        document.getElementById('error').textContent += ` The matrices below are still those of "${state.result.tokens.join(' ')}".`;
      }
      return;
    }
    input.removeAttribute('aria-invalid');
    document.getElementById('mirror').textContent = '';
    setError('', '');
    delete document.body.dataset.stale;
    state.result = r;
    state.parts = parts(r);
    window.attnLast = r; // for the tests and the curious: the library's own JSON
    window.attnParts = state.parts;
    scheduleSteps();
    renderQuiz(ctx());
    queueJob(additiveJob);
    renderStories(ctx());
    kernelBesideWalk(); // the second part's note (explainer_kernel.js)
    updateShift();
    document.body.dataset.sentence = r.tokens.join(' ');
    document.body.dataset.causal = r.causal ? '1' : '0';
    document.body.dataset.head = r.head;
  } catch (e) {
    setError('error', `Something went wrong: ${e.message}`);
  }
}

function renderStories(c) {
  const { r, t, s } = c;
  const { i, other: j } = asker(c);
  // No pair to compare: the verb and its subject are not claimed here either.
  if (c.cross) {
    document.getElementById('two-story').textContent = `With cross-attention the sentence's words look at the source's, which do not look back: ${t[i]} looks at ${s[j]} with score ${fmt(r.scores[i][j])}, and nothing here compares the two directions.`;
    return;
  }
  if (i === j) {
    document.getElementById('two-story').textContent = `With one word there is no pair: ${t[i]} looks only at itself, with score ${fmt(r.scores[i][i])}.`;
    return;
  }
  // The verb and its subject only where the pair is one: a verb looking at a
  // noun harder than the noun looks back, in a head wired to do so.
  const a = r.scores[i][j], b = r.scores[j][i], f = (name) => r.features.indexOf(name);
  const verbAndNoun = f('verb') >= 0 && f('noun') >= 0 && r.X[i][f('verb')] > 0 && r.X[j][f('noun')] > 0;
  const why = r.head.includes('tied') ? ': the same, because the one-matrix box is ticked.'
    : r.head.startsWith('wired') && verbAndNoun && a > b && fmt(a) !== fmt(b) ? '. A verb searches for its subject; the noun is not searching for its verb.'
      : fmt(a) === fmt(b) ? ': the same here, though nothing makes them so.'
        : '. The two directions differ: each is one word\'s query against the other\'s key, and W_Q and W_K make them differently.';
  document.getElementById('two-story').textContent =
    `Here ${t[i]} looks at ${s[j]} with score ${fmt(a)}, while ${t[j]} looks back at ${t[i]} with score ${fmt(b)}${why}`;
}

function onType() {
  clearTimeout(typingTimer);
  if (!typingTimer) typedFrom = state.sentence;
  typingTimer = setTimeout(() => { typingTimer = null; state.sentence = document.getElementById('sentence').value; update(true); }, 180);
}

function shuffleWords() {
  const r = state.result;
  if (!r) return;
  const n = r.tokens.length;
  const order = [...Array(n).keys()];
  // Fisher-Yates; retry so that a sentence of 2+ distinct words really moves.
  for (let tries = 0; tries < 20; tries++) {
    for (let i = n - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [order[i], order[j]] = [order[j], order[i]];
    }
    if (order.some((o, i) => r.tokens[o] !== r.tokens[i])) break;
  }
  // One word, or one word repeated: no order reads differently, and "the rows moved" would not be true.
  if (order.every((o, i) => r.tokens[o] === r.tokens[i])) {
    document.getElementById('shuffle-note').textContent =
      `Nothing to shuffle: ${n === 1 ? 'the sentence has one word' : 'every word of the sentence is the same'}. Try a sentence of different words.`;
    return;
  }
  const before = r;
  state.sentence = order.map((o) => r.tokens[o]).join(' ');
  document.getElementById('sentence').value = state.sentence;
  update();
  const after = state.result;
  // Without positions each output row moves with its word, unchanged; with
  // them, where a word stands changes what it takes in.
  const same = order.every((o, i) => after.output[i].every((x, j) => Math.abs(x - before.output[o][j]) < 1e-12));
  document.getElementById('shuffle-note').textContent = state.positions === 'none'
    ? (same ? 'Shuffled. Every word kept exactly the same output row; the rows only moved with their words.'
      : 'Shuffled. The outputs changed, which attention without positions should never do.')
    : (same ? 'Shuffled. The outputs only moved: these positions did not change anything here.'
      : `Shuffled. With ${state.positions === 'rope' ? 'RoPE' : 'sinusoidal'} positions the outputs changed, ` +
        'not only their order: where a word stands now counts.');
}

// ---- a dot product, or a small network? ----------------------------------------------------

// Additive attention on the same words (the library's attn_additive_scores and
// softmax, as attn explain --score additive), beside the dot product's weights.
const additiveJob = () => renderAdditive(ctx()); // one object: queued once however many changes came before it ran
function renderAdditive(c) {
  const { r, t } = c;
  const shown = r.head === 'wired' && !r.source_tokens && r.positions === 'none'; /* the wired head, self-attention */
  document.getElementById('additive-figs').hidden = !shown;
  document.getElementById('additive-figs-note').hidden = !shown;
  if (!shown) return;
  const a = withC([state.sentence], (sp) => lib.web_additive(sp, state.causal ? 1 : 0));
  if (a.error) return;
  mount('additive', [
    ['fig-dot', 'dot', heatmapSvg('dot', 'dot product: softmax(Q Kᵀ / √d_k)', r.weights, t, t, { rowSums: state.parts.row_sums, range: 1 }), null],
    ['fig-additive', 'additive', heatmapSvg('additive', 'additive: softmax(v · tanh(q + k))', a.weights, t, t, { range: 1 }), null],
  ]);
  window.attnAdditive = a;
}

// ---- quick check ----------------------------------------------------------------------------

// Questions whose answers come from the live result: each has choices, the
// right ones (every choice that ties for the answer), and the evidence.
function quizQuestions(c) {
  const { r, p, t, s } = c;
  const n = r.tokens.length, m = s.length;
  const { i } = asker(c);
  const row = r.weights[i], best = Math.max(...row);
  const right = row.map((w, j) => (Math.abs(w - best) < 1e-12 ? j : -1)).filter((j) => j >= 0);
  return [
    { q: 'What do the attention weights in each row add up to?',
      choices: ['the model size', '0', 'the sentence length', '1, because of the softmax'], right: [3],
      why: `Every row's sum, added up by the library: ${p.row_sums.map((x) => x.toFixed(3)).join(', ')}.` },
    { q: `Which word does "${t[i]}" give the largest weight?`, choices: s, right,
      why: `Its row of weights: ${row.map((w, j) => `${s[j]} ${pct(w)}`).join(', ')}${right.length > 1 ? ` (a tie: ${right.map((j) => s[j]).join(' and ')} are all right)` : ''}.` },
    m === n ? { q: `How many scores does this sentence of ${words(n)} have?`, ...counts([n, 2 * n, n * n, n * n * n], n * n),
      why: `Q Kᵀ is ${n} × ${n}: every word scores every word, so the cost grows with the square of the length.` }
      : { q: `How many scores do ${words(n)} reading a source of ${words(m)} have?`, ...counts([n + m, n * n, n * m, m * m], n * m),
        why: `Q Kᵀ is ${n} × ${m}: every word scores every source word.` },
  ];
}
const words = (n) => `${n} word${n === 1 ? '' : 's'}`;

// The choices of a count, each number once (with 2 words, 2n and n² are both 4:
// shown twice, one "4" was right and the other wrong), and the right one among them.
function counts(values, answer) {
  const choices = [...new Set(values)].map(String);
  return { choices, right: [choices.indexOf(String(answer))] };
}

function renderQuiz(c) {
  const box = document.getElementById('quiz');
  box.replaceChildren();
  quizQuestions(c).forEach((item, k) => {
    const fs = document.createElement('fieldset');
    fs.dataset.question = String(k);
    fs.appendChild(Object.assign(document.createElement('legend'), { textContent: item.q }));
    const answer = Object.assign(document.createElement('p'), { className: 'quiz-answer' });
    answer.setAttribute('aria-live', 'polite');
    item.choices.forEach((ch, i) => {
      const label = document.createElement('label');
      const input = Object.assign(document.createElement('input'), { type: 'radio', name: `quiz${k}`, value: String(i) });
      input.addEventListener('change', () => {
        const ok = item.right.includes(i);
        answer.dataset.correct = ok ? '1' : '0';
        answer.textContent = `${ok ? 'Right.' : `Not quite: ${item.right.map((x) => item.choices[x]).join(' or ')}.`} ${item.why}`;
      });
      label.append(input, ` ${ch}`);
      fs.appendChild(label);
    });
    fs.appendChild(answer);
    box.appendChild(fs);
  });
}

// ---- a head that learns ----------------------------------------------------------------------

// attn_train_head for `steps` steps from seed 1 (the library's own training,
// run here in WebAssembly), then its weights on `sentence`.
function train(sentence, steps) {
  return withC([sentence], (sp) => lib.web_train(sp, steps, 1));
}

// The loss per step on a log scale, drawn up to `upto` steps.
function lossCurve(loss, upto) {
  const w = 340, h = 160, pad = 30, n = loss.length;
  const logs = loss.map((x) => Math.log10(Math.max(x, 1e-6)));
  const lo = Math.min(...logs), hi = Math.max(...logs);
  const pts = logs.slice(0, upto).map((l, i) =>
    `${(pad + (w - 2 * pad) * i / Math.max(1, n - 1)).toFixed(1)},${(h - pad - (h - 2 * pad) * (l - lo) / (hi - lo || 1)).toFixed(1)}`);
  return `<svg width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" role="img" data-name="loss" aria-label="training loss over ${upto} steps">` +
    `<text class="muted-text" x="2" y="14">loss, step ${upto} of ${n}: ${loss[upto - 1].toFixed(4)} (log scale)</text>` +
    `<polyline points="${pts.join(' ')}" fill="none" stroke="#d62728" stroke-width="1.5"/>` +
    `<text class="muted-text" x="${pad}" y="${h - 8}">step 1</text><text class="muted-text" x="${w - pad - 50}" y="${h - 8}">step ${n}</text></svg>`;
}

// Train, showing checkpoints: each is the library's training run to that step
// from the same start, so the curve and the weights are those of one run.
function trainHead() {
  const checkpoints = [1, 10, 30, 100, 300, 1000];
  const button = document.getElementById('train');
  if (!state.result) return;
  button.disabled = true;
  // The sentence drawn, which the box's text is not while it holds an
  // unknown word ("the matrices below are still those of ...").
  const sentence = state.result.tokens.join(' ');
  const final = train(sentence, 1000);
  if (final.error) {
    document.getElementById('train-status').textContent = final.error;
    button.disabled = false;
    return;
  }
  let k = 0;
  const step = () => {
    const n = checkpoints[k];
    const r = n === 1000 ? final : train(sentence, n);
    const t = labelWords(r.tokens);
    document.getElementById('fig-loss').innerHTML = lossCurve(final.loss, n);
    mount('train', [['fig-trained', 'trained', heatmapSvg('trained', `learned weights after ${n} steps (causal)`, r.weights, t, t, { range: 1 }), null]]);
    document.getElementById('train-status').textContent = `step ${n}: loss ${final.loss[n - 1].toFixed(4)}`;
    document.body.dataset.trained = String(n);
    window.attnTrained = r;
    if (++k < checkpoints.length) setTimeout(step, 250);
    else button.disabled = false;
  };
  step();
}

// ---- the sqrt(d_k) demo and the table across d_k ---------------------------------------------

function histogram(title, hist, range, colour, active) {
  const w = 300, h = 120, pad = 24, bins = hist.length, bw = (w - 2 * pad) / bins;
  const ymax = Math.max(...hist, 1e-12);
  const bars = hist.map((v, b) => {
    const bh = (v / ymax) * (h - 24);
    return `<rect x="${(pad + b * bw).toFixed(1)}" y="${(h - bh).toFixed(1)}" width="${(bw * 0.9).toFixed(1)}" height="${bh.toFixed(1)}" fill="${colour}" opacity="${active ? 1 : 0.35}"/>`;
  }).join('');
  const ticks = [-1, 0, 1].map((k) => `<text class="muted-text" x="${w / 2 + (k * (w - 2 * pad)) / 2}" y="${h + 14}" text-anchor="middle">${k * range}</text>`).join('');
  return `<svg class="hist" width="${w}" height="${h + 36}" viewBox="0 0 ${w} ${h + 36}" role="img" aria-label="${esc(title)}">` +
    `<text class="muted-text" x="${w / 2}" y="13" text-anchor="middle">${esc(title)}</text>` +
    `<rect class="axis" x="${pad}" y="20" width="${w - 2 * pad}" height="${h - 20}"/>${bars}${ticks}` +
    `<text class="muted-text" x="${w / 2}" y="${h + 30}" text-anchor="middle">score</text></svg>`;
}

let sqrtAsked = 0;
function updateSqrt() {
  const d = 2 ** Number(document.getElementById('dk').value);
  const divide = document.getElementById('divide').checked;
  document.getElementById('dk-value').textContent = String(d);
  const asked = ++sqrtAsked;
  scaling(d, 200, 64, 1).then((row) => {
    if (asked !== sqrtAsked) return; // a later move of the slider wins
    document.getElementById('fig-hist-raw').innerHTML = histogram(`raw q·k, fixed axis (spread ${row.spread_raw.toFixed(2)})`,
      row.hist_raw, row.raw_range, '#d62728', !divide);
    document.getElementById('fig-hist-scaled').innerHTML = histogram(`q·k / √d_k (spread ${row.spread_scaled.toFixed(2)})`,
      row.hist_scaled, row.scaled_range, '#1f77b4', divide);
    document.getElementById('top-weight').textContent = (divide ? row.top_scaled : row.top_raw).toFixed(3);
    document.getElementById('grad-size').textContent = (divide ? row.grad_mean_scaled : row.grad_mean_raw).toFixed(3);
    document.body.dataset.dk = `${d}${divide ? '/' : ''}`;
  });
}

const TABLE_DIMS = [16, 64, 256, 1024];
let tableStarted = false;
function scalingTable() {
  if (tableStarted) return;
  tableStarted = true;
  const head = ['d_k', 'spread raw', 'spread /√d_k', 'spread /d_k', 'top raw', 'top /√d_k', 'top /d_k',
    'grad mean raw', 'grad mean /√d_k', 'grad median raw', 'grad median /√d_k'];
  const table = document.createElement('table');
  table.id = 'scaling-rows';
  table.className = 'data';
  table.innerHTML = `<caption>Settings: 2000 random queries, each against its own 64 random keys, every number of spread 1, seed 0 (attn scaling's defaults)</caption>` +
    `<tr>${head.map((h) => `<th scope="col">${h}</th>`).join('')}</tr>`;
  document.getElementById('scaling-table').replaceChildren(table);
  const rows = [];
  TABLE_DIMS.forEach((d, k) => scaling(d, 2000, 64, 0).then((r) => {
    rows[k] = r;
    const cells = [r.d, r.spread_raw.toFixed(2), r.spread_scaled.toFixed(3), r.spread_div_d.toFixed(3),
      r.top_raw.toFixed(3), r.top_scaled.toFixed(3), r.top_div_d.toFixed(3), r.grad_mean_raw.toFixed(4),
      r.grad_mean_scaled.toFixed(4), r.grad_median_raw.toExponential(2), r.grad_median_scaled.toFixed(4)];
    const tr = document.createElement('tr');
    tr.dataset.d = String(d);
    tr.innerHTML = cells.map((x) => `<td>${x}</td>`).join('');
    const after = [...table.querySelectorAll('tr[data-d]')].find((o) => +o.dataset.d > d);
    table.insertBefore(tr, after || null);
    if (rows.filter((x) => x).length === TABLE_DIMS.length) {
      window.attnScalingTable = rows;
      const big = rows[TABLE_DIMS.length - 1];
      const meanTen = big.grad_mean_scaled > 10 * big.grad_mean_raw, medianTen = big.grad_median_scaled > 10 * big.grad_median_raw;
      document.getElementById('scaling-claim').textContent =
        `Measured here, at d_k = 1024 without the division the top word takes ${(100 * big.top_raw).toFixed(1)}% of the weight on average ` +
        `(${(100 * big.top_scaled).toFixed(1)}% with it). The softmax's gradient, the Frobenius norm of its Jacobian, has a median of ` +
        `${big.grad_median_raw.toExponential(2)} against ${big.grad_median_scaled.toFixed(4)} with the division` +
        `${medianTen ? ', more than ten times smaller' : ''}: most queries stall almost completely. Its mean, ` +
        `${big.grad_mean_raw.toFixed(4)} against ${big.grad_mean_scaled.toFixed(4)}${meanTen ? ', is more than ten times smaller too' : ', is pulled up by the few queries whose softmax is not saturated'}.`;
    }
  }));
}

// ---- why softmax: the shift, live ---------------------------------------------------------------

const SHIFTS = [-1e30, -1000, -100, -1, 0, 1, 100, 1000, 1e30];
function updateShift() {
  const c = state.result && ctx();
  if (!c) return;
  const { r, t, s } = c;
  const i = r.tokens.length - 1; // the last word sees every word, masked or not
  const row = r.scaled[i].slice(0, 16);
  const shift = SHIFTS[Number(document.getElementById('shift').value)];
  document.getElementById('shift-value').textContent = shift === 0 ? '0' : Math.abs(shift) >= 1e30 ? `${shift < 0 ? '−' : '+'}10³⁰` : (shift > 0 ? '+' : '−') + Math.abs(shift);
  document.getElementById('shift-row-name').textContent = `the row of "${t[i]}"`;
  const base = withC([row], (p) => lib.web_softmax(p, row.length, 0));
  const moved = withC([row], (p) => lib.web_softmax(p, row.length, shift));
  const extreme = [1e30, 0, -1e30];
  const ext = withC([extreme], (p) => lib.web_softmax(p, 3, 0));
  const same = base.weights.every((w, j) => Math.abs(w - moved.weights[j]) < 1e-9);
  const tr = (cells) => `<tr>${cells.map((x) => `<td>${x}</td>`).join('')}</tr>`;
  document.getElementById('fig-shift').innerHTML =
    `<table class="data"><tr><th scope="col">word</th><th scope="col">score</th><th scope="col">score + shift</th><th scope="col">weight</th><th scope="col">weight after the shift</th></tr>` +
    row.map((x, j) => tr([esc(s[j]), fmt(x), Math.abs(moved.shifted[j]) >= 1e6 ? moved.shifted[j].toExponential(3) : fmt(moved.shifted[j]),
      fmt(base.weights[j]), fmt(moved.weights[j])])).join('') + `</table>` +
    `<p>${same ? 'The same weights: the shift cancelled.' : 'At ±10³⁰ every score rounds to the same number in double precision (10³⁰ + 1 is 10³⁰), so the row itself has changed: the weights go flat, yet every one of them is still a number: nothing overflowed.'}</p>` +
    `<p>Scores of +10³⁰, 0 and −10³⁰, where e<sup>x</sup> alone overflows: the library's softmax gives ${ext.weights.map(fmt).join(', ')} (sum ${fmt(ext.sum)}), because it subtracts the row's maximum first.</p>`;
}

// ---- export -------------------------------------------------------------------------------------

function exportSvg() {
  const names = ['X', 'W_Q', 'W_K', 'W_V', 'Q', 'K', 'V', 'scores', 'scaled', 'weights', 'output'];
  drainJobs();
  let y = 0, width = 0;
  const SVGNS = 'http://www.w3.org/2000/svg';
  const out = document.createElementNS(SVGNS, 'svg');
  out.setAttribute('xmlns', SVGNS);
  const style = document.createElementNS(SVGNS, 'style');
  style.textContent = 'text{font-family:monospace;font-size:12px} .title{font-family:sans-serif;font-weight:600} .label{font-family:sans-serif;fill:#55555f} rect.cell-bg{stroke:white}';
  out.appendChild(style);
  for (const name of names) {
    const src = heatmaps[name] && heatmaps[name].svg;
    if (!src) continue;
    const g = document.createElementNS(SVGNS, 'g');
    g.setAttribute('transform', `translate(0 ${y})`);
    for (const child of src.children) {
      const copy = child.cloneNode(true);
      copy.classList && copy.classList.remove('empty', 'hl', 'active');
      g.appendChild(copy);
    }
    out.appendChild(g);
    y += Number(src.getAttribute('height')) + 16;
    width = Math.max(width, Number(src.getAttribute('width')));
  }
  out.setAttribute('width', width);
  out.setAttribute('height', y);
  out.setAttribute('viewBox', `0 0 ${width} ${y}`);
  const text = '<?xml version="1.0" encoding="UTF-8"?>\n' + new XMLSerializer().serializeToString(out);
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([text], { type: 'image/svg+xml' }));
  // Named after the sentence drawn (the box may hold a word the toy does not know yet).
  a.download = `attention-${(state.result ? state.result.tokens.join('-') : 'heatmaps').slice(0, 60)}.svg`;
  document.body.appendChild(a);
  a.click();
  a.remove();
}

// ---- the library-search picture ---------------------------------------------------------------

function drawLibrary() {
  const books = [['animal?', '#d62728'], ['thing?', '#1f77b4'], ['place?', '#7f7f7f'], ['noun?', '#9467bd']];
  const out = [`<svg class="library" width="330" height="150" viewBox="0 0 330 150" role="img" aria-label="a library search: the query is typed into a search box, keys are the labels on the books' spines, values are what is inside the books">`,
    `<rect x="4" y="8" width="150" height="28" rx="6" fill="none" stroke="currentColor"/>`,
    `<text x="12" y="27">query: "an animal?"</text>`,
    `<text class="muted-text" x="160" y="27">what you type</text>`];
  books.forEach(([label, colour], k) => {
    const x = 10 + k * 56;
    out.push(`<rect x="${x}" y="52" width="44" height="70" rx="3" fill="${colour}" opacity="${k === 0 ? 1 : 0.45}"/>`,
      `<text x="${x + 22}" y="92" text-anchor="middle" transform="rotate(-90 ${x + 22} 88)" fill="#fff" style="fill:#fff">${label}</text>`);
  });
  out.push(`<text class="muted-text" x="10" y="140">keys: the labels on the spines</text>`,
    `<path d="M240,70 l40,-8 l40,8 v50 l-40,-8 l-40,8 z" fill="none" stroke="currentColor"/>`,
    `<text class="muted-text" x="236" y="140">value: inside the book</text></svg>`);
  document.getElementById('fig-library').innerHTML = out.join('');
}

// ---- start ---------------------------------------------------------------------------------------

function buildVocab() {
  const box = document.getElementById('vocab');
  document.getElementById('vocab-size').textContent = String(vocab().words.length);
  for (const word of vocab().words) {
    const b = Object.assign(document.createElement('button'), { type: 'button', textContent: word });
    b.addEventListener('click', () => {
      const input = document.getElementById('sentence');
      input.value = (input.value.trimEnd() + ' ' + word).trimStart();
      state.sentence = input.value;
      update();
      input.focus();
    });
    box.appendChild(b);
  }
}

// The controls as the state says (at load, and when the link changes).
function showState() {
  document.getElementById('sentence').value = state.sentence;
  document.getElementById('causal').checked = state.causal;
  document.getElementById('head-scale').checked = !state.noScale;
  document.getElementById('positions').value = state.positions;
  document.getElementById('heads').value = String(state.heads);
  document.getElementById('tied').checked = state.tied;
  document.getElementById('source').value = state.source;
  document.getElementById('scale-by-model').checked = state.scaleByModel;
  document.querySelector(`input[name=head][value=${state.head}]`).checked = true;
}

// A link the toy cannot take opens on what it can, drawn, with the error that
// says what was replaced: a sentence with an unknown word on the nearest
// sentence the toy knows; one with no words or too many on the default; a bad
// source sentence on the link's sentence alone (self-attention). Clearing the
// box writes such a link (#s=), so a reload opens one.
function openLink() {
  // The sentence is checked before the source: a link bad in both takes two turns.
  const texts = [];
  for (let turn = 0; turn < 2; turn++) {
    const r = explain(state);
    if (!r.error) break;
    if (/^the source/.test(r.error)) {
      texts.push((r.start >= 0 ? `The link's source sentence "${state.source}": ${unknownText(wordAt(state.source, r), r.suggestion)}`
        : `The link's source sentence ${r.error.replace(/^the source: the sentence /, '')}.`) +
        ' Showing the sentence on itself (self-attention).');
      state.source = '';
    } else {
      const asked = state.sentence;
      const nearest = nearestSentence(state.sentence);
      state.sentence = nearest;
      texts.push(r.start >= 0
        ? `The link's sentence "${asked}" has a word the toy does not know: ${unknownText(wordAt(asked, r), r.suggestion)} ` +
          `Showing the nearest sentence it knows: "${nearest}".`
        : `The link's sentence ${r.error.replace(/^the sentence /, '')}. Showing "${nearest}".`);
    }
  }
  if (!texts.length) return;
  const text = texts.join(' ');
  showState();
  update();
  setError('link', text);
  document.getElementById('error').dataset.kind = 'error';
}

function onKey(ev) {
  if (ev.key !== 'ArrowRight' && ev.key !== 'ArrowLeft') return;
  const t = ev.target;
  if (t.closest && (t.closest('input, select, textarea, svg.heatmap[tabindex], .scroll'))) return;
  const step = currentStep;
  if (!step) return;
  ev.preventDefault();
  stopPlaying();
  setFill(step, step.filled + (ev.key === 'ArrowRight' ? 1 : -1));
}

const nextTask = () => new Promise((resolve) => setTimeout(resolve, 0));

// A reload goes back to the place being read. The browser's own restoring keeps
// the scroll's pixels, but a section is laid out only once it has been seen
// (content-visibility), at a guessed height until then, and which ones were
// seen differs between the two loads: on a phone the same pixels landed up to a
// screen away, in another step. The place is kept as the part of the page at the
// top of the view and how far into it, and taken back once the page is drawn.
// (The browser still restores its pixels first: a manual restoring would also
// leave the scroll where it is on going back over a contents link.)
const PLACE_KEY = 'attn-explainer-place';
function placeNow() {
  const parts = [...document.querySelectorAll('main > [id]')];
  const at = parts.filter((el) => el.getBoundingClientRect().top <= 0).pop();
  if (!at) return null;
  const r = at.getBoundingClientRect();
  return { id: at.id, into: r.height > 0 ? -r.top / r.height : 0 };
}
function keepPlace() {
  try { sessionStorage.setItem(PLACE_KEY, JSON.stringify(placeNow())); } catch (e) { /* no storage: the top of the page */ }
}
async function backToPlace() {
  let place = null;
  try { place = JSON.parse(sessionStorage.getItem(PLACE_KEY)); } catch (e) { return; }
  const nav = performance.getEntriesByType('navigation')[0];
  if (!place || !nav || nav.type !== 'reload' || !place.id || document.getElementById(location.hash.slice(1))) return;
  const el = document.getElementById(place.id);
  if (!el || el.parentElement !== document.querySelector('main')) return;
  // Until it stays put: the parts drawn on arrival (and the second part's, whose
  // numbers come a few tasks later) take other heights than the ones guessed.
  // The reader comes first: their wheel, touch or key, or a scroll this loop did
  // not make (the scrollbar), ends it where they went. So does a place the scroll
  // cannot reach once the page is drawn (it ends first): a move that moves nothing.
  const frames = () => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  const drawn = () => document.body.dataset.rendered === '1';
  let reader = false;
  const readerMoves = () => { reader = true; };
  const events = ['wheel', 'touchstart', 'keydown', 'mousedown'];
  for (const e of events) addEventListener(e, readerMoves, { capture: true, passive: true });
  // The browser's scroll anchoring would move the scroll too, as the parts above
  // are drawn (on a phone by a screen and more, away from the place): off until
  // the place is back, so that a scroll this loop did not make is the reader's.
  const root = document.scrollingElement, anchoring = root.style.overflowAnchor;
  root.style.overflowAnchor = 'none';
  const until = performance.now() + 3000;
  try {
    for (let set = null; !reader && performance.now() < until;) {
      if (set !== null && Math.abs(scrollY - set) > 1) break; // not this loop's scroll
      const r = el.getBoundingClientRect(), by = r.top + place.into * r.height, from = scrollY;
      scrollTo(0, from + by);
      set = scrollY;
      if (Math.abs(by) <= 1 && drawn()) break;
      if (Math.abs(set - from) <= 1 && drawn()) break; // as near as the page's end lets it
      await frames();
      while (!drawn() && !reader && performance.now() < until) await new Promise((done) => setTimeout(done, 20));
      await frames();
    }
  } finally {
    root.style.overflowAnchor = anchoring;
    for (const e of events) removeEventListener(e, readerMoves, { capture: true });
  }
}

async function main() {
  addEventListener('pagehide', keepPlace);
  await loadLibrary();
  await nextTask();
  startWorker();
  readFragment();
  const input = document.getElementById('sentence');
  showState();
  addPlayers();
  kernelControls(); // the second part's (explainer_kernel.js)
  drawLibrary();
  input.addEventListener('input', onType);
  const on = (id, ev, f) => document.getElementById(id).addEventListener(ev, (e) => { f(e.target); update(); });
  on('causal', 'change', (t) => { state.causal = t.checked; });
  on('head-scale', 'change', (t) => { state.noScale = !t.checked; });
  on('positions', 'change', (t) => { state.positions = t.value; });
  on('heads', 'change', (t) => { state.heads = Number(t.value); });
  on('tied', 'change', (t) => { state.tied = t.checked; });
  on('scale-by-model', 'change', (t) => { state.scaleByModel = t.checked; });
  let sourceTimer = null;
  document.getElementById('source').addEventListener('input', (e) => {
    clearTimeout(sourceTimer);
    sourceTimer = setTimeout(() => { state.source = e.target.value.trim(); update(); }, 180);
  });
  for (const radio of document.querySelectorAll('input[name=head]'))
    radio.addEventListener('change', (e) => { state.head = e.target.value; update(); });
  for (const b of document.querySelectorAll('button.try'))
    b.addEventListener('click', () => { state.sentence = b.dataset.sentence; showState(); update(); });
  document.getElementById('shuffle').addEventListener('click', shuffleWords);
  document.getElementById('export').addEventListener('click', exportSvg);
  document.getElementById('train').addEventListener('click', trainHead);
  document.getElementById('dk').addEventListener('input', updateSqrt);
  document.getElementById('divide').addEventListener('change', updateSqrt);
  document.getElementById('shift').addEventListener('input', updateShift);
  // Hovering, tapping or focusing a cell explains it (one listener per page).
  const cellOf = (e) => {
    const g = e.target.closest && e.target.closest('svg.heatmap g.cell');
    return g && heatmaps[g.closest('svg').dataset.name] ? g : null;
  };
  const explainCell = (e) => {
    const g = cellOf(e);
    if (g) return showCell(g.closest('svg').dataset.name, +g.dataset.i, +g.dataset.j);
    // A row label of the weights: that word's attention as bars.
    const label = e.target.closest && e.target.closest('svg.heatmap[data-name="weights"] .row-label[tabindex]');
    if (label && state.result) {
      showBars(ctx(), +label.dataset.i);
      if (e.type !== 'mouseover') say([...document.getElementById('bars').children]
        .map((d) => (d.children.length ? [...d.children].map((x) => x.textContent).filter((x) => x).join(' ') : d.textContent)).join('; '));
    }
  };
  document.addEventListener('mouseover', explainCell);
  document.addEventListener('click', explainCell);
  document.addEventListener('focusin', (e) => {
    keepFocusClear(e.target);
    explainCell(e);
    const svg = e.target.closest && e.target.closest('svg.heatmap[tabindex]');
    const h = svg && heatmaps[svg.dataset.name];
    if (h && svg === e.target) { h.kbd = h.kbd || [0, 0]; showCell(svg.dataset.name, ...h.kbd); if (sayStep) sayNow(); }
  });
  document.addEventListener('keydown', (ev) => {
    const svg = ev.target.closest && ev.target.closest('svg.heatmap[tabindex]');
    const h = svg && heatmaps[svg.dataset.name];
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (!h || !moves[ev.key]) return onKey(ev);
    ev.preventDefault();
    // The keyboard's own cursor: the scroll's filling and the mouse do not move it.
    const [i, j] = h.kbd || [0, 0];
    h.kbd = [Math.max(0, Math.min(h.rows - 1, i + moves[ev.key][0])), Math.max(0, Math.min(h.cols - 1, j + moves[ev.key][1]))];
    showCell(svg.dataset.name, ...h.kbd);
    if (sayStep) sayNow();
  });
  // A fragment that names a part of the page (a contents link, #step-q) is a place to go, not
  // a sentence and settings: reading it as those reset the reader's sentence and controls to the
  // defaults. The scroll has gone there; the fragment goes back to saying the state.
  window.addEventListener('hashchange', () => {
    if (document.getElementById(location.hash.slice(1))) return writeFragment();
    readFragment(); showState(); update(); openLink(); // a link pasted over the open page opens as one opened afresh
  });
  let scrollQueued = false;
  const queueScroll = () => { if (!scrollQueued) { scrollQueued = true; requestAnimationFrame(() => { scrollQueued = false; onScroll(); }); } };
  addEventListener('scroll', queueScroll, { passive: true });
  // A new width can make a figure too wide for its box, or wide enough: each step measures
  // again as it is seen (a narrowed window left its figures' scrollers without the tab stop and the hint).
  addEventListener('resize', () => {
    releaseHeld();
    for (const s of Object.values(steps)) s.overflowMarked = false;
    lastScrollY = -1;
    queueScroll();
  });
  reducedMotion.addEventListener('change', () => { for (const s of Object.values(steps)) setFill(s, s.cells.length); });
  buildVocab();
  await nextTask();
  update();
  openLink();
  await nextTask();
  // The measurements start when their sections come near the view.
  const near = new IntersectionObserver((entries) => {
    for (const e of entries) {
      if (!e.isIntersecting) continue;
      if (e.target.id === 'dk-demo') updateSqrt();
      if (e.target.id === 'step-sqrt') scalingTable();
      near.unobserve(e.target);
    }
  }, { rootMargin: '400px 0px' });
  near.observe(document.getElementById('dk-demo'));
  near.observe(document.getElementById('step-sqrt'));
  await backToPlace();
  onScroll();
  document.body.dataset.ready = '1';
}

main().catch((e) => {
  setError('error', `The page could not start: ${e.message}`);
});
