// explainer.js -- the explainer page: calls libattn (WebAssembly) and draws
// every matrix it returns. No arithmetic on the numbers happens here except
// formatting and the sums shown on hover, which restate what the library did.
'use strict';

// ---- the library --------------------------------------------------------

let lib = null;

async function loadLibrary() {
  const bytes = Uint8Array.from(atob(WASM_BASE64), (c) => c.charCodeAt(0));
  // The library does no I/O; these WASI imports exist only because libc
  // links them. They answer ENOSYS (52) if ever called.
  const nosys = () => 52;
  const imports = { wasi_snapshot_preview1: { fd_close: nosys, fd_seek: nosys, fd_write: nosys } };
  const { instance } = await WebAssembly.instantiate(bytes, imports);
  lib = instance.exports;
  lib._initialize();
}

function readString(ptr) {
  const mem = new Uint8Array(lib.memory.buffer);
  let end = ptr;
  while (mem[end]) end++;
  return new TextDecoder().decode(mem.subarray(ptr, end));
}

// Explain `sentence`: the same JSON object as `attn explain --json`, or
// {error, start, length, suggestion}.
const POSITIONS = ['none', 'sinusoidal', 'rope'];
// A string in the library's memory (free it with lib.web_free).
function cString(text) {
  const bytes = new TextEncoder().encode(text + '\0');
  const ptr = lib.web_alloc(bytes.length);
  new Uint8Array(lib.memory.buffer).set(bytes, ptr);
  return ptr;
}

function explain(sentence, head, causal, noScale, positions = 'none', tied = false, source = '', scaleByModel = false) {
  const ptr = cString(sentence), src = cString(source);
  try {
    return JSON.parse(readString(lib.web_explain(ptr, head === 'random' ? 1 : head === 'where' ? 2 : 0, causal ? 1 : 0,
      noScale ? 1 : 0, 0, Math.max(0, POSITIONS.indexOf(positions)), tied ? 1 : 0, src, scaleByModel ? 1 : 0)));
  } finally {
    lib.web_free(ptr);
    lib.web_free(src);
  }
}

const scalingCache = new Map();
function scaling(d) {
  if (!scalingCache.has(d)) scalingCache.set(d, JSON.parse(readString(lib.web_scaling(d, 200, 64, 1))));
  return scalingCache.get(d);
}

// ---- state and the URL fragment ---------------------------------------------

const state = { sentence: 'the cat sat on the mat', causal: false, head: 'wired', noScale: false, positions: 'none',
  heads: 1, tied: false, source: '', scaleByModel: false, result: null };

function readFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.has('s')) state.sentence = params.get('s');
  state.causal = params.get('causal') === '1';
  state.head = params.get('head') === 'random' ? 'random' : 'wired';
  state.noScale = params.get('noscale') === '1';
  state.positions = POSITIONS.includes(params.get('pos')) ? params.get('pos') : 'none';
  state.heads = params.get('heads') === '2' ? 2 : 1;
  state.tied = params.get('tied') === '1';
  state.source = params.get('src') || '';
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

// ---- drawing helpers ------------------------------------------------------------

const SVG = 'http://www.w3.org/2000/svg';

function svgEl(tag, attrs = {}, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// The number as shown: 3 decimals, masked scores as -inf, no "-0.000".
function fmt(x) {
  if (x === null) return '-inf';
  const s = x.toFixed(3);
  return s === '-0.000' ? '0.000' : s;
}

// White at 0, red for positive, blue for negative (as in the terminal).
function shade(t) {
  const end = t >= 0 ? [214, 39, 40] : [31, 119, 180];
  const a = Math.min(1, Math.abs(t));
  const c = end.map((e) => Math.round(255 + (e - 255) * a));
  return { fill: `rgb(${c.join(',')})`, ink: a > 0.6 ? 'white' : '#1d1d1f' };
}

const heatmaps = {}; // name -> {svg, cells[i][j], rows, cols, ...}

// A labelled matrix as an SVG heatmap. Cells are <g class="cell" data-i data-j>
// holding a rect and the number; the tests read these.
function heatmap(name, title, data, rowLabels, colLabels, opts = {}) {
  const rows = data.length, cols = data[0].length;
  const cw = 54, ch = 22, lw = 12 + 7.5 * Math.max(...rowLabels.map((l) => l.length));
  const lh = 16 + 7 * Math.max(...colLabels.map((l) => Math.min(l.length, 11))) * 0.75;
  const sums = opts.rowSums ? 1 : 0;
  // Column labels are drawn slanted, so the last one overhangs to the right.
  const overhang = 6 * Math.min(11, colLabels[cols - 1].length);
  const width = lw + (cols + sums) * cw + Math.max(8, overhang), height = 24 + lh + rows * ch + 6;
  const svg = svgEl('svg', { class: 'heatmap', width, height, viewBox: `0 0 ${width} ${height}`,
    'data-name': name, role: 'group', 'aria-label': `${title}, ${rows} by ${cols}` });
  svg.appendChild(svgEl('text', { class: 'title', x: 2, y: 14 }, `${title}  (${rows}, ${cols})`));
  let range = 0;
  for (const row of data) for (const x of row) if (x !== null) range = Math.max(range, Math.abs(x));
  const top = 24 + lh;
  colLabels.forEach((l, j) => {
    const x = lw + j * cw + cw / 2;
    svg.appendChild(svgEl('text', { class: 'label', x, y: top - 6, 'text-anchor': 'start',
      transform: `rotate(-40 ${x} ${top - 6})` }, l));
  });
  if (sums) {
    const x = lw + cols * cw + cw / 2;
    svg.appendChild(svgEl('text', { class: 'label', x, y: top - 6, 'text-anchor': 'middle' }, 'sum'));
  }
  const cells = [];
  const rowLabelEls = [];
  data.forEach((row, i) => {
    const y = top + i * ch;
    const label = svgEl('text', { class: 'label row-label', x: lw - 6, y: y + 15, 'text-anchor': 'end',
      'data-i': i }, rowLabels[i]);
    if (opts.onRowLabel) {
      label.setAttribute('tabindex', '0');
      label.setAttribute('role', 'button');
      label.setAttribute('aria-label', `${rowLabels[i]}: show its attention as bars`);
      label.addEventListener('mouseenter', () => opts.onRowLabel(i));
      label.addEventListener('focus', () => opts.onRowLabel(i));
    }
    svg.appendChild(label);
    rowLabelEls.push(label);
    cells.push(row.map((x, j) => {
      const g = svgEl('g', { class: 'cell', 'data-i': i, 'data-j': j });
      const colour = x === null ? { fill: '#c8c8cc', ink: '#1d1d1f' } : shade(range > 0 ? x / range : 0);
      g.appendChild(svgEl('rect', { class: 'cell-bg', x: lw + j * cw, y, width: cw, height: ch, fill: colour.fill }));
      const masked = opts.masked && opts.masked(i, j); /* a causal mask's zero: not the softmax's choice */
      g.appendChild(svgEl('text', { x: lw + j * cw + cw - 5, y: y + 15, 'text-anchor': 'end', fill: colour.ink },
        masked ? '·' : fmt(x)));
      if (opts.onCell) g.addEventListener('mouseenter', () => focusCell(name, i, j));
      svg.appendChild(g);
      return g;
    }));
    if (sums) {
      const s = row.reduce((a, b) => a + (b === null ? 0 : b), 0);
      svg.appendChild(svgEl('text', { class: 'label row-sum', x: lw + cols * cw + cw - 5, y: y + 15,
        'text-anchor': 'end' }, s.toFixed(3)));
    }
  });
  const h = { svg, cells, rows, cols, rowLabelEls, active: null, onCell: opts.onCell };
  heatmaps[name] = h;
  if (opts.onCell) {
    // Keyboard: focus the matrix, then the arrow keys move the active cell.
    svg.setAttribute('tabindex', '0');
    svg.setAttribute('aria-label', `${title}: use the arrow keys to explain a cell`);
    svg.addEventListener('focus', () => { if (!h.active) focusCell(name, 0, 0); });
    svg.addEventListener('keydown', (ev) => {
      const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
      if (!moves[ev.key] || !h.active) return;
      ev.preventDefault();
      const [di, dj] = moves[ev.key];
      focusCell(name, Math.max(0, Math.min(rows - 1, h.active[0] + di)), Math.max(0, Math.min(cols - 1, h.active[1] + dj)));
    });
  }
  return svg;
}

function clearHighlights() {
  for (const h of Object.values(heatmaps)) {
    for (const row of h.cells) for (const g of row) g.classList.remove('hl', 'active');
  }
}

function highlight(name, { row = -1, col = -1 }) {
  const h = heatmaps[name];
  if (!h) return;
  h.cells.forEach((r, i) => r.forEach((g, j) => { if (i === row || j === col) g.classList.add('hl'); }));
}

function focusCell(name, i, j) {
  const h = heatmaps[name];
  clearHighlights();
  for (const other of Object.values(heatmaps)) other.active = other === h ? [i, j] : null;
  h.cells[i][j].classList.add('active');
  h.onCell(i, j);
}

// "a×b + c×d + ... = total", the sum behind one cell.
function sumText(pairs, total) {
  const terms = pairs.map(([a, b]) => `${fmt(a)}×${fmt(b)}`).join(' + ');
  return `${terms} = ${fmt(total)}`;
}

function put(id, node) {
  const box = document.getElementById(id);
  box.replaceChildren(node);
}

// ---- the panels -------------------------------------------------------------------

function column(m, j) { return m.map((row) => row[j]); }

function renderMatrices(r) {
  const t = r.tokens, s = r.source_tokens || r.tokens; // s: the keys' words (the source's, in cross-attention)
  // The lookup: each word's id is its row of the embedding table E (the vocabulary's order).
  const vocab = JSON.parse(readString(lib.web_vocab())).words;
  document.getElementById('lookup').textContent =
    `ids: ${t.map((w) => `${w} ${vocab.indexOf(w)}`).join(', ')}; X = E[ids], the table's rows for these ids ` +
    `(E has ${vocab.length} rows, one per word of the vocabulary).`;
  const qCols = r.Q[0].map((_, j) => `d${j}`);
  put('fig-X', heatmap('X', 'X', r.X, t, r.features));
  put('fig-W_Q', heatmap('W_Q', 'W_Q', r.W_Q, r.features, qCols));
  put('fig-W_K', heatmap('W_K', 'W_K', r.W_K, r.features, qCols));
  put('fig-W_V', heatmap('W_V', 'W_V', r.W_V, r.features, r.value_features));
  put('fig-Q', heatmap('Q', 'Q = X W_Q', r.Q, t, qCols, { onCell: (i, j) => {
    highlight('X', { row: i }); highlight('W_Q', { col: j });
    document.getElementById('products-Q').textContent =
      `Q[${t[i]}, d${j}] = X[${t[i]}, ·] · W_Q[·, d${j}] = ` +
      sumText(r.X[i].map((x, k) => [x, r.W_Q[k][j]]), r.Q[i][j]);
  } }));
  const from = r.source_tokens ? 'X_source' : 'X';
  put('fig-K', heatmap('K', `K = ${from} W_K`, r.K, s, qCols));
  put('fig-V', heatmap('V', `V = ${from} W_V`, r.V, s, r.value_features));
  put('fig-scores', heatmap('scores', 'Q Kᵀ', r.scores, t, s, { onCell: (i, j) => {
    highlight('Q', { row: i }); highlight('K', { row: j });
    document.getElementById('products-scores').textContent =
      `score(${t[i]} → ${s[j]}) = Q[${t[i]}] · K[${s[j]}] = ` +
      sumText(r.Q[i].map((q, k) => [q, r.K[j][k]]), r.scores[i][j]);
  } }));
  const title = state.noScale ? 'Q Kᵀ, not divided' : state.scaleByModel ? 'Q Kᵀ / √d_model (the slip)' : 'Q Kᵀ / √d_k';
  put('fig-scaled', heatmap('scaled', r.causal ? `${title}, future masked` : title, r.scaled, t, s));
  put('fig-weights', heatmap('weights', r.causal ? 'softmax, row by row (· masked)' : 'softmax, row by row', r.weights,
    t, s, { rowSums: true, onRowLabel: (i) => showBars(r, i), masked: r.causal ? (i, j) => j > i : null }));
  put('fig-output', heatmap('output', 'output = weights V', r.output, t, r.value_features, { onCell: (i, j) => {
    highlight('weights', { row: i }); highlight('V', { col: j });
    document.getElementById('products-output').textContent =
      `output[${t[i]}, ${r.value_features[j]}] = weights[${t[i]}] · V[·, ${r.value_features[j]}] = ` +
      sumText(r.weights[i].map((w, k) => [w, r.V[k][j]]), r.output[i][j]);
  } }));
  renderLines(r);
}

function showBars(r, i) {
  const box = document.getElementById('bars');
  const rows = r.weights[i].map((w, j) => {
    const div = document.createElement('div');
    div.className = 'bar-row';
    const name = document.createElement('span');
    name.textContent = (r.source_tokens || r.tokens)[j];
    const bar = document.createElement('span');
    bar.className = 'bar';
    bar.style.width = `${Math.round(w * 300)}px`;
    const pct = document.createElement('span');
    pct.textContent = `${(100 * w).toFixed(1)}%`;
    div.append(name, bar, pct);
    return div;
  });
  const title = document.createElement('p');
  title.textContent = `How "${r.tokens[i]}" splits its attention:`;
  box.replaceChildren(title, ...rows);
}

function renderLines(r) {
  const keys = r.source_tokens || r.tokens;
  const n = r.tokens.length, m = keys.length, rowH = 26, width = 460, height = 20 + Math.max(n, m) * rowH;
  const svg = svgEl('svg', { class: 'lines', width, height, viewBox: `0 0 ${width} ${height}`,
    role: 'group', 'aria-label': 'attention lines: words asking on the left, words asked on the right' });
  const lines = [];
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < m; j++) {
      const w = r.weights[i][j];
      if (w <= 0) continue;
      const line = svgEl('line', { x1: 130, y1: 20 + i * rowH, x2: 330, y2: 20 + j * rowH,
        stroke: '#b3261e', 'stroke-width': (0.5 + 10 * w).toFixed(2), 'stroke-opacity': (0.15 + 0.85 * w).toFixed(2),
        'data-i': i, 'data-j': j });
      lines.push(line);
      svg.appendChild(line);
    }
  }
  const isolate = (i) => lines.forEach((l) => l.classList.toggle('dimmed', i !== null && +l.dataset.i !== i));
  r.tokens.forEach((tok, i) => {
    const left = svgEl('text', { class: 'word', x: 122, y: 24 + i * rowH, 'text-anchor': 'end', tabindex: 0,
      role: 'button', 'aria-label': `${tok}: show only its lines` }, tok);
    left.addEventListener('mouseenter', () => isolate(i));
    left.addEventListener('focus', () => isolate(i));
    left.addEventListener('mouseleave', () => isolate(null));
    left.addEventListener('blur', () => isolate(null));
    svg.appendChild(left);
  });
  keys.forEach((tok, j) => svg.appendChild(svgEl('text', { class: 'word-right', x: 338, y: 24 + j * rowH }, tok)));
  put('fig-lines', svg);
}

// ---- the sentence, the error, the update loop ------------------------------------

function showError(result, sentence) {
  const input = document.getElementById('sentence');
  const mirror = document.getElementById('mirror');
  const error = document.getElementById('error');
  if (!result.error) {
    input.removeAttribute('aria-invalid');
    error.textContent = '';
    mirror.textContent = '';
    return;
  }
  input.setAttribute('aria-invalid', 'true');
  if (result.start >= 0) {
    // Offsets are in UTF-8 bytes; map them back to the string.
    const bytes = new TextEncoder().encode(sentence);
    const dec = new TextDecoder();
    const before = dec.decode(bytes.subarray(0, result.start));
    const word = dec.decode(bytes.subarray(result.start, result.start + result.length));
    const after = dec.decode(bytes.subarray(result.start + result.length));
    const mark = document.createElement('mark');
    mark.textContent = word;
    mirror.replaceChildren(document.createTextNode(before), mark, document.createTextNode(after));
    error.textContent = result.suggestion
      ? `"${word}" is not in the toy vocabulary. Did you mean "${result.suggestion}"?`
      : `"${word}" is not in the toy vocabulary, which knows: ${JSON.parse(readString(lib.web_vocab())).words.join(' ')}.`;
  } else {
    mirror.textContent = '';
    error.textContent = result.error.replace(/^the sentence/, 'The sentence') + '.';
  }
}

function update() {
  try {
    const r = explain(state.sentence, state.head, state.causal, state.noScale, state.positions, state.tied, state.source,
      state.scaleByModel);
    showError(r, state.sentence);
    writeFragment();
    // A note about a shuffle belongs to the sentence it shuffled.
    document.getElementById('shuffle-note').textContent = '';
    // After an error the matrices still show the last sentence that worked:
    // dimmed, and the message says so.
    if (r.error) {
      if (state.result) {
        document.body.dataset.stale = '1';
        document.getElementById('error').textContent +=
          ` The matrices below are still those of "${state.result.tokens.join(' ')}".`;
      }
      return;
    }
    delete document.body.dataset.stale;
    renderHeads();
    renderQuiz(r);
    renderAdditive(r);
    state.result = r;
    window.attnLast = r; // for the tests and the curious: the library's own JSON
    renderMatrices(r);
    document.body.dataset.sentence = r.tokens.join(' ');
    document.body.dataset.causal = r.causal ? '1' : '0';
    document.body.dataset.head = r.head;
  } catch (e) {
    document.getElementById('error').textContent = `Something went wrong: ${e.message}`;
  }
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

// ---- a dot product, or a small network? ----------------------------------------------

// Additive attention on the same words (the library's attn_additive_scores and
// softmax, as attn explain --score additive), beside the dot product's weights.
function renderAdditive(r) {
  const shown = r.head === 'wired' && !r.source_tokens; /* the wired head, self-attention */
  document.getElementById('step-additive').hidden = !shown;
  if (!shown) return;
  const ptr = cString(state.sentence);
  let a;
  try {
    a = JSON.parse(readString(lib.web_additive(ptr, state.causal ? 1 : 0)));
  } finally {
    lib.web_free(ptr);
  }
  if (a.error) return;
  put('fig-dot', heatmap('dot', 'dot product: softmax(Q Kᵀ / √d_k)', r.weights, r.tokens, r.tokens, { rowSums: true }));
  put('fig-additive', heatmap('additive', 'additive: softmax(v · tanh(q + k))', a.weights, r.tokens, r.tokens,
    { rowSums: true }));
  window.attnAdditive = a;
}

// ---- quick check ---------------------------------------------------------------------

// Questions whose answers come from the live result r: each has choices, the
// right one, and the evidence on screen that shows why.
function quizQuestions(r) {
  const keys = r.source_tokens || r.tokens;
  const n = r.tokens.length, m = keys.length, sums = r.weights.map((row) => row.reduce((a, b) => a + b, 0));
  // The first word that gives one other word its largest share (a verb, when there is one).
  const asker = Math.max(0, r.tokens.findIndex((t, i) => i > 0 && ['sat', 'ran', 'chased', 'jumped', 'saw', 'slept'].includes(t)));
  const top = r.weights[asker].indexOf(Math.max(...r.weights[asker]));
  const words = [...new Set(keys)];
  return [
    { q: 'What do the attention weights in each row add up to?',
      choices: ['the model size', '0', 'the sentence length', '1, because of the softmax'], right: 3,
      why: `Every row's sum on screen: ${sums.map((x) => x.toFixed(3)).join(', ')}.` },
    { q: `Which word does "${r.tokens[asker]}" give the largest weight?`, choices: words,
      right: words.indexOf(keys[top]),
      why: `Its row of weights: ${r.weights[asker].map((w, j) => `${keys[j]} ${(100 * w).toFixed(0)}%`).join(', ')}.` },
    m === n ? { q: `How many scores does this sentence of ${n} words have?`,
      choices: [String(n), String(2 * n), String(n * n), String(n * n * n)], right: 2,
      why: `Q Kᵀ is ${n} × ${n}: every word scores every word, so the cost grows with the square of the length.` }
      : { q: `How many scores do ${n} words reading a source of ${m} words have?`,
        choices: [String(n + m), String(n * n), String(n * m), String(m * m)], right: 2,
        why: `Q Kᵀ is ${n} × ${m}: every word scores every source word.` },
  ];
}

function renderQuiz(r) {
  const box = document.getElementById('quiz');
  box.replaceChildren();
  quizQuestions(r).forEach((item, k) => {
    const fs = document.createElement('fieldset');
    fs.dataset.question = String(k);
    fs.appendChild(Object.assign(document.createElement('legend'), { textContent: item.q }));
    const answer = Object.assign(document.createElement('p'), { className: 'quiz-answer' });
    answer.setAttribute('aria-live', 'polite');
    item.choices.forEach((c, i) => {
      const label = document.createElement('label');
      const input = Object.assign(document.createElement('input'), { type: 'radio', name: `quiz${k}`, value: String(i) });
      input.addEventListener('change', () => {
        const ok = i === item.right;
        answer.dataset.correct = ok ? '1' : '0';
        answer.textContent = `${ok ? 'Right.' : `Not quite: ${item.choices[item.right]}.`} ${item.why}`;
      });
      label.append(input, ` ${c}`);
      fs.appendChild(label);
    });
    fs.appendChild(answer);
    box.appendChild(fs);
  });
}

// ---- two heads at once --------------------------------------------------------------

// With two heads: the wired head ("who did it?") and the "where?" head side by
// side, each from the library; their outputs side by side (the concat), and W_O
// writing each head's value features back into the word's features.
function renderHeads() {
  const section = document.getElementById('step-heads');
  section.hidden = state.heads !== 2;
  document.body.dataset.heads = String(state.heads);
  if (state.heads !== 2) return;
  const h = ['wired', 'where'].map((name) => explain(state.sentence, name, state.causal, state.noScale, state.positions,
    state.tied, state.source));
  if (h.some((r) => r.error)) return;
  const t = h[0].tokens;
  put('fig-head1', heatmap('head1', 'head 1: who did it?', h[0].weights, t, t, { rowSums: true }));
  put('fig-head2', heatmap('head2', 'head 2: where?', h[1].weights, t, t, { rowSums: true }));
  const cols = [...h[0].value_features.map((f) => `1:${f}`), ...h[1].value_features.map((f) => `2:${f}`)];
  const concat = t.map((_, i) => [...h[0].output[i], ...h[1].output[i]]);
  const feats = h[0].features;
  const out = concat.map((row) => feats.map((f) => row.reduce((s, x, c) => s + (cols[c].slice(2) === f ? x : 0), 0)));
  put('fig-concat', heatmap('concat', 'concat: both heads\' outputs', concat, t, cols));
  put('fig-heads-out', heatmap('heads-output', 'concat · W_O: back into the features', out, t, feats));
  window.attnHeads = { heads: h, concat, output: out };
}

// ---- a head that learns -----------------------------------------------------------

// attn_train_head for `steps` steps from seed 1 (the library's own training,
// run here in WebAssembly), then its weights on `sentence`.
function train(sentence, steps) {
  const bytes = new TextEncoder().encode(sentence + '\0');
  const ptr = lib.web_alloc(bytes.length);
  new Uint8Array(lib.memory.buffer).set(bytes, ptr);
  try {
    return JSON.parse(readString(lib.web_train(ptr, steps, 1)));
  } finally {
    lib.web_free(ptr);
  }
}

// The loss per step on a log scale, drawn up to `upto` steps.
function lossCurve(loss, upto) {
  const w = 340, h = 160, pad = 30, n = loss.length;
  const logs = loss.map((x) => Math.log10(Math.max(x, 1e-6)));
  const lo = Math.min(...logs), hi = Math.max(...logs);
  const svg = svgEl('svg', { width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: 'img', 'data-name': 'loss',
    'aria-label': `training loss over ${upto} steps` });
  svg.appendChild(svgEl('text', { class: 'title', x: 2, y: 14 }, `loss, step ${upto} of ${n}: ${loss[upto - 1].toFixed(4)}`));
  const pts = logs.slice(0, upto).map((l, i) =>
    `${(pad + (w - 2 * pad) * i / Math.max(1, n - 1)).toFixed(1)},${(h - pad - (h - 2 * pad) * (l - lo) / (hi - lo || 1)).toFixed(1)}`);
  svg.appendChild(svgEl('polyline', { points: pts.join(' '), fill: 'none', stroke: '#d62728', 'stroke-width': 1.5 }));
  svg.appendChild(svgEl('text', { x: pad, y: h - 8 }, 'step 1'));
  svg.appendChild(svgEl('text', { x: w - pad - 40, y: h - 8 }, `step ${n}`));
  return svg;
}

// Train, showing checkpoints: each is the library's training run to that step
// from the same start, so the curve and the weights are those of one run.
function trainHead() {
  const checkpoints = [1, 10, 30, 100, 300, 1000];
  const button = document.getElementById('train');
  button.disabled = true;
  const final = train(state.sentence, 1000);
  if (final.error) {
    document.getElementById('train-status').textContent = final.error;
    button.disabled = false;
    return;
  }
  let k = 0;
  const step = () => {
    const steps = checkpoints[k];
    const r = steps === 1000 ? final : train(state.sentence, steps);
    put('fig-loss', lossCurve(final.loss, steps));
    put('fig-trained', heatmap('trained', `learned weights after ${steps} steps (causal)`, r.weights, r.tokens,
      r.tokens, { rowSums: true }));
    document.getElementById('train-status').textContent = `step ${steps}: loss ${final.loss[steps - 1].toFixed(4)}`;
    document.body.dataset.trained = String(steps);
    window.attnTrained = r;
    if (++k < checkpoints.length) setTimeout(step, 250);
    else button.disabled = false;
  };
  step();
}

// ---- the table across d_k, as attn scaling prints it ------------------------------

const TABLE_DIMS = [16, 64, 256, 1024];
function scalingTable() {
  const rows = TABLE_DIMS.map((d) => JSON.parse(readString(lib.web_scaling(d, 2000, 64, 0))));
  const table = document.createElement('table');
  table.id = 'scaling-rows';
  const head = ['d_k', 'spread raw', 'spread /√d_k', 'spread /d_k', 'top raw', 'top /√d_k', 'top /d_k',
    'grad mean raw', 'grad mean /√d_k', 'grad median raw', 'grad median /√d_k'];
  const tr = document.createElement('tr');
  for (const h of head) tr.appendChild(Object.assign(document.createElement('th'), { textContent: h }));
  table.appendChild(tr);
  for (const r of rows) {
    const cells = [r.d, r.spread_raw.toFixed(2), r.spread_scaled.toFixed(3), (r.spread_raw / r.d).toFixed(3),
      r.top_raw.toFixed(3), r.top_scaled.toFixed(3), r.top_div_d.toFixed(3), r.grad_mean_raw.toFixed(4),
      r.grad_mean_scaled.toFixed(4), r.grad_median_raw.toExponential(2), r.grad_median_scaled.toFixed(4)];
    const row = document.createElement('tr');
    for (const c of cells) row.appendChild(Object.assign(document.createElement('td'), { textContent: String(c) }));
    table.appendChild(row);
  }
  put('scaling-table', table);
  window.attnScalingTable = rows;
}

// ---- the sqrt(d_k) demo -------------------------------------------------------------

function histogram(title, hist, range, colour, active) {
  const w = 320, h = 130, pad = 26, bins = hist.length, bw = (w - 2 * pad) / bins;
  const svg = svgEl('svg', { width: w, height: h + 40, viewBox: `0 0 ${w} ${h + 40}`, role: 'img',
    'aria-label': title });
  const ymax = Math.max(...hist, 1e-12);
  svg.appendChild(svgEl('text', { x: w / 2, y: 14, 'text-anchor': 'middle', 'font-size': 12 }, title));
  svg.appendChild(svgEl('rect', { x: pad, y: 20, width: w - 2 * pad, height: h - 20, fill: 'none', stroke: '#999' }));
  hist.forEach((v, b) => {
    const bh = (v / ymax) * (h - 24);
    svg.appendChild(svgEl('rect', { x: pad + b * bw, y: h - bh, width: bw * 0.9, height: bh, fill: colour,
      opacity: active ? 1 : 0.35 }));
  });
  [-1, 0, 1].forEach((k) => svg.appendChild(svgEl('text', { x: w / 2 + (k * (w - 2 * pad)) / 2, y: h + 14,
    'text-anchor': 'middle', 'font-size': 11 }, String(k * range))));
  svg.appendChild(svgEl('text', { x: w / 2, y: h + 32, 'text-anchor': 'middle', 'font-size': 11 }, 'score'));
  return svg;
}

function updateSqrt() {
  const d = 2 ** Number(document.getElementById('dk').value);
  const divide = document.getElementById('divide').checked;
  document.getElementById('dk-value').textContent = String(d);
  const row = scaling(d);
  put('fig-hist-raw', histogram(`raw q·k, fixed axis (spread ${row.spread_raw.toFixed(2)})`, row.hist_raw,
    row.raw_range, '#d62728', !divide));
  put('fig-hist-scaled', histogram(`q·k / √d_k (spread ${row.spread_scaled.toFixed(2)})`, row.hist_scaled,
    row.scaled_range, '#1f77b4', divide));
  document.getElementById('top-weight').textContent = (divide ? row.top_scaled : row.top_raw).toFixed(3);
  document.getElementById('grad-size').textContent = (divide ? row.grad_mean_scaled : row.grad_mean_raw).toFixed(3);
  document.body.dataset.dk = String(d);
}

// ---- export ---------------------------------------------------------------------

function exportSvg() {
  const names = ['X', 'W_Q', 'W_K', 'W_V', 'Q', 'K', 'V', 'scores', 'scaled', 'weights', 'output'];
  let y = 0, width = 0;
  const out = svgEl('svg', { xmlns: SVG });
  const style = svgEl('style', {}, 'text{font-family:monospace;font-size:12px} .title{font-family:sans-serif;font-weight:600} .label{font-family:sans-serif;fill:#5b5b66} rect.cell-bg{stroke:white}');
  out.appendChild(style);
  for (const name of names) {
    const src = heatmaps[name] && heatmaps[name].svg;
    if (!src) continue;
    const g = svgEl('g', { transform: `translate(0 ${y})` });
    for (const child of src.children) g.appendChild(child.cloneNode(true));
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
  a.download = `attention-${state.sentence.trim().split(/\s+/).join('-').slice(0, 60) || 'heatmaps'}.svg`;
  document.body.appendChild(a);
  a.click();
  a.remove();
}

// ---- start ------------------------------------------------------------------------

function buildVocab() {
  const vocab = JSON.parse(readString(lib.web_vocab()));
  const box = document.getElementById('vocab');
  for (const word of vocab.words) {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = word;
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

async function main() {
  await loadLibrary();
  readFragment();
  const input = document.getElementById('sentence');
  showState();
  input.addEventListener('input', () => { state.sentence = input.value; update(); });
  document.getElementById('causal').addEventListener('change', (e) => { state.causal = e.target.checked; update(); });
  document.getElementById('head-scale').addEventListener('change', (e) => { state.noScale = !e.target.checked; update(); });
  document.getElementById('positions').addEventListener('change', (e) => { state.positions = e.target.value; update(); });
  document.getElementById('heads').addEventListener('change', (e) => { state.heads = Number(e.target.value); update(); });
  document.getElementById('tied').addEventListener('change', (e) => { state.tied = e.target.checked; update(); });
  document.getElementById('source').addEventListener('input', (e) => { state.source = e.target.value.trim(); update(); });
  document.getElementById('scale-by-model').addEventListener('change', (e) => { state.scaleByModel = e.target.checked; update(); });
  for (const radio of document.querySelectorAll('input[name=head]'))
    radio.addEventListener('change', (e) => { state.head = e.target.value; update(); });
  document.getElementById('shuffle').addEventListener('click', shuffleWords);
  document.getElementById('export').addEventListener('click', exportSvg);
  document.getElementById('train').addEventListener('click', trainHead);
  document.getElementById('dk').addEventListener('input', updateSqrt);
  document.getElementById('divide').addEventListener('change', updateSqrt);
  window.addEventListener('hashchange', () => {
    readFragment();
    showState();
    update();
  });
  buildVocab();
  update();
  updateSqrt();
  document.body.dataset.ready = '1';
  setTimeout(scalingTable, 0); /* a second or so of work: after the first paint */
}

main().catch((e) => {
  document.getElementById('error').textContent = `The page could not start: ${e.message}`;
});
