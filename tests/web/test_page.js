// test_page.js -- the explainer page in a real browser (Debian's Chromium,
// driven by playwright-core): the numbers on the page are the C library's
// (equal to `attn explain --json` to the digits shown, and exactly in the
// page's own JSON), the toggles, the sqrt(d_k) demo, errors, export, and
// screenshots for review.
//
// Usage: node tests/web/test_page.js BUILD_DIR. Prints "ok NAME" / "FAIL NAME: why".
'use strict';

const { chromium } = require('playwright-core');
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const BUILD = path.resolve(process.argv[2] || 'build');
const PAGE = 'file://' + path.join(BUILD, 'explainer.html');
const ATTN = path.join(BUILD, 'attn');
const MATRICES = ['X', 'W_Q', 'W_K', 'W_V', 'Q', 'K', 'V', 'scores', 'scaled', 'weights', 'output'];
let failed = 0;

function report(name, ok, why = '') {
  console.log(ok ? `ok ${name}` : `FAIL ${name}: ${why}`);
  if (!ok) failed++;
}

// The page's number format, restated: 3 decimals, null as -inf, no -0.000.
function fmt(x) {
  if (x === null) return '-inf';
  const s = x.toFixed(3);
  return s === '-0.000' ? '0.000' : s;
}

function cli(sentence, extra = []) {
  return JSON.parse(execFileSync(ATTN, ['explain', '--json', ...extra, sentence], { encoding: 'utf8' }));
}

// Every matrix as shown: name -> rows of cell texts.
async function shownMatrices(page) {
  return page.evaluate((names) => {
    const out = {};
    for (const name of names) {
      const svg = document.querySelector(`svg.heatmap[data-name="${name}"]`);
      if (!svg) continue;
      const rows = [];
      for (const g of svg.querySelectorAll('g.cell')) {
        const i = +g.dataset.i, j = +g.dataset.j;
        (rows[i] = rows[i] || [])[j] = g.querySelector('text').textContent;
      }
      out[name] = rows;
    }
    return out;
  }, MATRICES);
}

async function setSentence(page, sentence) {
  await page.fill('#sentence', sentence);
  const want = sentence.toLowerCase().match(/[a-z0-9']+/g).join(' ');
  await page.waitForFunction((w) => document.body.dataset.sentence === w, want, { timeout: 5000 });
}

async function compareWithCli(page, name, sentence, extra) {
  const want = cli(sentence, extra);
  const shown = await shownMatrices(page);
  const bad = [];
  for (const m of MATRICES) {
    // Under a causal mask a masked weight shows as "·", not as the 0.000 it is.
    const expect = want[m].map((row, i) => row.map((x, j) => (m === 'weights' && want.causal && j > i ? '·' : fmt(x))));
    if (JSON.stringify(shown[m]) !== JSON.stringify(expect)) bad.push(m);
  }
  report(`page_digits_equal_cli_${name}`, bad.length === 0, `matrices differ: ${bad.join(', ')}`);
  const exact = await page.evaluate(() => window.attnLast);
  const same = MATRICES.every((m) => JSON.stringify(exact[m]) === JSON.stringify(want[m])) &&
    JSON.stringify(exact.tokens) === JSON.stringify(want.tokens);
  report(`page_json_equals_cli_exactly_${name}`, same, 'the wasm result differs from the native one');
}

async function upperTriangle(page, name) {
  const m = (await shownMatrices(page))[name];
  const cells = [];
  m.forEach((row, i) => row.forEach((x, j) => { if (j > i) cells.push(x); }));
  return cells;
}

async function topWeight(page, step, divide) {
  await page.setChecked('#divide', divide);
  await page.fill('#dk', String(step));
  await page.waitForFunction((d) => document.body.dataset.dk === d, String(2 ** step));
  return Number(await page.textContent('#top-weight'));
}

async function main() {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--no-first-run'],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, acceptDownloads: true });
  const page = await context.newPage();
  const errors = [], requests = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('request', (r) => { if (!r.url().startsWith('file:') && !r.url().startsWith('blob:')) requests.push(r.url()); });

  await page.goto(PAGE);
  await page.waitForFunction(() => document.body.dataset.ready === '1', null, { timeout: 15000 });
  report('page_loads', true);

  // The numbers: several sentences, both heads, causal.
  await compareWithCli(page, 'default', 'the cat sat on the mat', []);
  for (const s of ['the dog chased a ball in the park', 'My quick brown fox jumped over a lazy dog!', 'a big red hat']) {
    await setSentence(page, s);
    await compareWithCli(page, s.split(' ').length + '_words', s, []);
  }
  await page.check('input[name=head][value=random]');
  await page.waitForFunction(() => document.body.dataset.head === 'random');
  await compareWithCli(page, 'random_head', 'a big red hat', ['--random-head']);
  await page.check('input[name=head][value=wired]');
  await page.waitForFunction(() => document.body.dataset.head === 'wired');

  // Causal: the weights' upper triangle is zero, the scaled scores' is -inf.
  await setSentence(page, 'the cat sat on the mat');
  await page.check('#causal');
  await page.waitForFunction(() => document.body.dataset.causal === '1');
  const wUpper = await upperTriangle(page, 'weights'), sUpper = await upperTriangle(page, 'scaled');
  report('causal_upper_triangle_masked', wUpper.length === 15 && wUpper.every((x) => x === '·') &&
    sUpper.every((x) => x === '-inf'), `${wUpper} | ${sUpper}`);
  await compareWithCli(page, 'causal', 'the cat sat on the mat', ['--causal']);
  report('fragment_records_state', page.url().includes('causal=1') && page.url().includes('s=the+cat+sat'), page.url());
  await page.uncheck('#causal');

  // The sqrt(d_k) demo: without dividing the top weight rises with d_k; with it, it stays flat.
  const raw = [await topWeight(page, 2, false), await topWeight(page, 6, false), await topWeight(page, 10, false)];
  report('sqrt_demo_top_weight_rises_unscaled', raw[0] < raw[1] && raw[1] < raw[2] && raw[2] > 0.9, String(raw));
  const scaled = [await topWeight(page, 2, true), await topWeight(page, 6, true), await topWeight(page, 10, true)];
  report('sqrt_demo_top_weight_flat_scaled', Math.max(...scaled) - Math.min(...scaled) < 0.03 && scaled[2] < 0.2,
    String(scaled));
  const grads = [await page.textContent('#grad-size')];
  report('sqrt_demo_gradient_shown', /^\d\.\d{3}$/.test(grads[0]), grads[0]);

  // An unknown word: inline message with the closest word, underlined, no exception.
  await page.fill('#sentence', 'the cta sat');
  await page.waitForFunction(() => document.getElementById('error').textContent.length > 0);
  const error = await page.textContent('#error');
  const marked = await page.textContent('#mirror mark');
  const invalid = await page.getAttribute('#sentence', 'aria-invalid');
  report('unknown_word_inline_error', error.includes('"cta"') && error.includes('"cat"') && marked === 'cta' &&
    invalid === 'true', `${error} | ${marked} | ${invalid}`);
  report('unknown_word_dims_old_matrices', (await page.getAttribute('body', 'data-stale')) === '1' &&
    error.includes('still those of'), error);
  // A word far from every known word gets the vocabulary, not a guess.
  await page.fill('#sentence', 'the Elephant sat');
  await page.waitForFunction(() => /Elephant/.test(document.getElementById('error').textContent));
  const far = await page.textContent('#error');
  report('far_word_lists_vocabulary', !/Did you mean/.test(far) && far.includes('chased') && far.includes('garden'), far);
  await setSentence(page, 'the cat sat');
  report('good_sentence_clears_stale', (await page.getAttribute('body', 'data-stale')) === null);
  await page.click('#shuffle');
  await page.waitForFunction(() => document.getElementById('shuffle-note').textContent.length > 0);
  await setSentence(page, 'a dog ran');
  report('new_sentence_clears_shuffle_note', (await page.textContent('#shuffle-note')) === '');
  await page.fill('#sentence', '   ');
  await page.waitForFunction(() => /no words/.test(document.getElementById('error').textContent));
  report('empty_sentence_message', true);

  // Clicking a word of the vocabulary inserts it.
  await setSentence(page, 'the cat');
  await page.click('#vocab button:text-is("sat")');
  await page.waitForFunction(() => document.body.dataset.sentence === 'the cat sat');
  report('vocab_click_inserts_word', (await page.inputValue('#sentence')) === 'the cat sat');

  // Hovering a cell of Q shows the row, the column and the sum.
  await setSentence(page, 'the cat sat on the mat');
  await page.hover('svg.heatmap[data-name="Q"] g.cell[data-i="2"][data-j="0"]');
  const products = await page.textContent('#products-Q');
  const hl = await page.evaluate(() => [
    document.querySelectorAll('svg[data-name="X"] g.hl').length,
    document.querySelectorAll('svg[data-name="W_Q"] g.hl').length]);
  report('hover_q_cell_explains_sum', products.includes('Q[sat, d0]') && products.endsWith('= 1.200') &&
    hl[0] === 8 && hl[1] === 8, `${products} | ${hl}`);
  await page.hover('svg.heatmap[data-name="scores"] g.cell[data-i="2"][data-j="1"]');
  report('hover_score_cell', (await page.textContent('#products-scores')).endsWith('= 1.920'),
    await page.textContent('#products-scores'));
  // The keyboard does the same: focus the matrix, then arrow keys. The mouse
  // leaves the page first, so that scrolling cannot hover a cell.
  await page.mouse.move(0, 0);
  await page.evaluate(() => document.querySelector('svg.heatmap[data-name="output"]').scrollIntoView());
  await page.mouse.move(1, 1);
  await page.focus('svg.heatmap[data-name="output"]');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowRight');
  report('keyboard_moves_active_cell', (await page.textContent('#products-output')).startsWith('output[sat, verb]'),
    await page.textContent('#products-output'));
  await page.hover('svg.heatmap[data-name="weights"] .row-label[data-i="2"]');
  const bars = await page.$$eval('#bars .bar-row', (rows) => rows.map((r) => r.textContent));
  report('weights_row_label_shows_bars', bars.length === 6 && bars[1].includes('cat') && bars[1].includes('39.9%'),
    String(bars));
  await page.hover('svg.lines .word >> nth=2');
  const dimmed = await page.$$eval('svg.lines line.dimmed', (l) => l.length);
  report('lines_hover_isolates_word', dimmed === 30, `${dimmed} lines dimmed`);

  // Shuffle: every output row moves with its word.
  await page.click('#shuffle');
  const note = await page.textContent('#shuffle-note');
  report('shuffle_keeps_rows', note.includes('kept exactly the same output row') &&
    (await page.inputValue('#sentence')) !== 'the cat sat on the mat', note);

  // Export: one SVG file with the heatmaps.
  await setSentence(page, 'the cat sat on the mat');
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export')]);
  const file = await download.path();
  const svg = fs.readFileSync(file, 'utf8');
  report('export_svg', svg.startsWith('<?xml') && svg.includes('<svg') && svg.includes('0.399') &&
    svg.includes('softmax'), svg.slice(0, 120));

  // A shared link opens that view directly.
  const linked = await context.newPage();
  linked.on('pageerror', (e) => errors.push(e.message));
  await linked.goto(PAGE + '#s=the+dog+chased+a+ball&causal=1');
  await linked.waitForFunction(() => document.body.dataset.sentence === 'the dog chased a ball');
  report('fragment_opens_view', (await linked.inputValue('#sentence')) === 'the dog chased a ball' &&
    (await linked.isChecked('#causal')) && (await upperTriangle(linked, 'weights')).every((x) => x === '·'));

  // A long sentence: every figure shows whole, shrunk to fit rather than cropped in a scroller.
  await setSentence(page, 'the quick brown fox jumped over the lazy dog with the small red bird on the big box in the garden');
  const cropped = await page.evaluate(() => [...document.querySelectorAll('.step:not(#step-sqrt) .figure')]
    .filter((f) => f.scrollWidth > f.clientWidth + 1).map((f) => f.id));
  report('long_sentence_not_cropped', cropped.length === 0, cropped.join(' '));
  // The head's own "divide by sqrt(d_k)" toggle: off, the scaled step is the raw scores, and the link keeps it.
  await setSentence(page, 'the cat sat on the mat');
  await page.uncheck('#head-scale');
  await page.waitForFunction(() => /noscale=1/.test(location.hash));
  const unscaled = await page.evaluate(() => [window.attnLast.scale, window.attnLast.scaled[2][1], window.attnLast.scores[2][1]]);
  report("head_scale_toggle", unscaled[0] === 1 && unscaled[1] === unscaled[2] && unscaled[2] > 1.9, String(unscaled));
  await page.check('#head-scale');
  await page.waitForFunction(() => !/noscale/.test(location.hash));

  // Positions: the library's own numbers (the same as attn explain --positions), and a
  // shuffle that changes the outputs, not only their order.
  for (const kind of ['sinusoidal', 'rope']) {
    await setSentence(page, 'the cat sat on the mat');
    await page.selectOption('#positions', kind);
    await page.waitForFunction((k) => new RegExp('pos=' + k).test(location.hash), kind);
    const shown = await page.evaluate(() => window.attnLast.weights);
    const want = cli('the cat sat on the mat', ['--positions', kind]).weights;
    const agree = shown.every((row, i) => row.every((x, j) => Math.abs(x - want[i][j]) < 1e-12));
    await page.click('#shuffle');
    await page.waitForFunction(() => document.getElementById('shuffle-note').textContent.length > 0);
    const note = await page.textContent('#shuffle-note');
    report(`positions_${kind}_on_the_page`, agree && /not only their order/.test(note), note);
  }
  await page.selectOption('#positions', 'none');

  // Two heads side by side: the library's own heads, as attn explain --heads 2 --json.
  await setSentence(page, 'my dog chased a ball in the park');
  await page.selectOption('#heads', '2');
  await page.waitForFunction(() => /heads=2/.test(location.hash) && document.body.dataset.heads === '2');
  const shownHeads = await page.evaluate(() => window.attnHeads);
  const wantHeads = JSON.parse(execFileSync(ATTN, ['explain', '--heads', '2', '--json', 'my dog chased a ball in the park'],
    { encoding: 'utf8' }));
  const close = (a, b) => a.every((row, i) => row.every((x, j) => Math.abs(x - b[i][j]) < 1e-12));
  report('two_heads_side_by_side', await page.isVisible('#fig-head2 svg') &&
    close(shownHeads.heads[1].weights, wantHeads.heads[1].weights) && close(shownHeads.concat, wantHeads.concat) &&
    close(shownHeads.output, wantHeads.output), JSON.stringify(shownHeads.output[2]));
  await page.selectOption('#heads', '1');
  report('one_head_hides_the_second', !(await page.isVisible('#step-heads')));

  // The table across d_k: the same rows as attn scaling's defaults.
  await page.waitForFunction(() => window.attnScalingTable, null, { timeout: 60000 });
  const pageRows = await page.evaluate(() => window.attnScalingTable);
  const cliRows = JSON.parse(execFileSync(ATTN, ['scaling', '--json', '--no-train', '--dims', '16,64,256,1024'],
    { encoding: 'utf8' })).rows;
  const keys = ['spread_raw', 'spread_scaled', 'top_raw', 'top_scaled', 'top_div_d', 'grad_mean_raw', 'grad_median_raw'];
  report('scaling_table_equals_attn_scaling', pageRows.length === 4 && pageRows.every((r, i) =>
    keys.every((k) => Math.abs(r[k] - cliRows[i][k]) < 1e-12)) && (await page.$$('#scaling-rows tr')).length === 5,
    JSON.stringify(pageRows[3]));

  // Tied weights and cross-attention: the library's numbers, the same as attn explain's,
  // and in the link (tied=1, src=...).
  await setSentence(page, 'the cat sat on the mat');
  await page.check('#tied');
  await page.waitForFunction(() => /tied=1/.test(location.hash));
  const tiedShown = await page.evaluate(() => window.attnLast.scores);
  const tiedWant = cli('the cat sat on the mat', ['--tied']).scores;
  report('tied_on_the_page', close(tiedShown, tiedWant) && tiedShown[2][1] === tiedShown[1][2], String(tiedShown[2][1]));
  await page.uncheck('#tied');
  await page.fill('#source', 'my dog chased a ball');
  await page.waitForFunction(() => /src=my/.test(location.hash) && window.attnLast.source_tokens);
  const crossShown = await page.evaluate(() => window.attnLast);
  const crossWant = cli('the cat sat on the mat', ['--source', 'my dog chased a ball']);
  const kLabels = await page.$$eval('svg.heatmap[data-name="K"] text.row-label', (ls) => ls.map((l) => l.textContent));
  report('cross_attention_on_the_page', close(crossShown.weights, crossWant.weights) && crossShown.weights[0].length === 5 &&
    kLabels.length === 5 && kLabels.includes('chased'), `${crossShown.weights[0].length} keys; ${kLabels}`);
  await page.fill('#source', '');
  await page.waitForFunction(() => !/src=/.test(location.hash));

  // The lookup: each word's id, as attn explain --step tokens prints them.
  const lookup = await page.textContent('#lookup');
  const ids = execFileSync(ATTN, ['explain', '--step', 'tokens', 'the cat sat on the mat'], { encoding: 'utf8' })
    .match(/ids: ([\d ]+)/)[1].trim().split(' ');
  report('lookup_ids_on_the_page', ['the', 'cat', 'sat', 'on', 'the', 'mat'].every((w, i) => lookup.includes(`${w} ${ids[i]}`)),
    `${lookup} | ${ids}`);

  // Additive attention beside the dot product, and the sqrt(d_model) slip: the command's numbers.
  await setSentence(page, 'the cat sat on the mat');
  const additive = await page.evaluate(() => window.attnAdditive.weights);
  const addText = execFileSync(ATTN, ['explain', '--score', 'additive', 'the cat sat on the mat'], { encoding: 'utf8' })
    .split('additive weights')[1];
  const satRow = addText.split('\n').find((l) => l.trim().startsWith('sat')).trim().split(/\s+/).slice(1, 7).map(Number);
  report('additive_on_the_page', additive[2].every((x, j) => Math.abs(x - satRow[j]) < 6e-4) &&
    await page.isVisible('#fig-additive svg'), `${additive[2]} | ${satRow}`);
  await page.check('#scale-by-model');
  await page.waitForFunction(() => /scaleby=d_model/.test(location.hash));
  const slip = await page.evaluate(() => window.attnLast);
  const slipWant = cli('the cat sat on the mat', ['--scale-by', 'd_model']);
  report('scale_by_d_model_on_the_page', Math.abs(slip.scale - 1 / Math.sqrt(8)) < 1e-15 && close(slip.weights, slipWant.weights),
    String(slip.scale));
  await page.uncheck('#scale-by-model');

  // The quick check: answers worked out from the live matrices.
  await setSentence(page, 'the cat sat on the mat');
  await page.check('fieldset[data-question="0"] input[value="3"]');
  const a0 = await page.textContent('fieldset[data-question="0"] .quiz-answer');
  await page.check('fieldset[data-question="2"] input[value="0"]');
  const a2 = await page.textContent('fieldset[data-question="2"] .quiz-answer');
  const q1 = await page.textContent('fieldset[data-question="1"] legend');
  await page.check('fieldset[data-question="1"] input[value="1"]'); // "cat", the words being the, cat, sat, on, mat
  const a1 = await page.textContent('fieldset[data-question="1"] .quiz-answer');
  report('quick_check_from_live_numbers', /^Right\./.test(a0) && /1\.000/.test(a0) && /^Not quite: 36\./.test(a2) &&
    /"sat"/.test(q1) && /^Right\./.test(a1) && /cat 40%/.test(a1), `${a0} | ${a1} | ${a2}`);

  // Training on the page: the library's own run, so its loss and learned weights
  // equal `attn train`'s for the same seed and steps.
  await setSentence(page, 'the cat sat on the mat');
  await page.click('#train');
  await page.waitForFunction(() => document.body.dataset.trained === '1000', null, { timeout: 60000 });
  const trained = await page.evaluate(() => window.attnTrained);
  const want = JSON.parse(execFileSync(ATTN, ['train', '--json', '--steps', '1000', '--seed', '1', 'the cat sat on the mat'],
    { encoding: 'utf8' }));
  const same = (a, b) => a.length === b.length && a.every((x, i) => Array.isArray(x) ? same(x, b[i]) : Math.abs(x - b[i]) < 1e-12);
  report('train_on_the_page_equals_attn_train', same(trained.loss, want.loss) && same(trained.weights.flat(), want.weights) &&
    trained.weights[2][1] > 0.5, `sat -> cat ${trained.weights[2][1]}`);

  // Screenshots for review, wide and narrow; the narrow page does not scroll sideways.
  await page.screenshot({ path: path.join(BUILD, 'explainer.png'), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  const overflow = await page.evaluate(() => document.scrollingElement.scrollWidth - window.innerWidth);
  await page.screenshot({ path: path.join(BUILD, 'explainer-narrow.png'), fullPage: false });
  report('narrow_screen_no_sideways_scroll', overflow <= 1, `${overflow}px too wide`);

  report('no_page_errors', errors.length === 0, errors.join(' | '));
  report('offline_no_requests', requests.length === 0, requests.join(' '));
  await browser.close();
}

main().then(() => process.exit(failed ? 1 : 0)).catch((e) => {
  console.log(`FAIL browser_test: ${e.stack || e}`);
  process.exit(1);
});
