// The viewer's controller: log in, open a study, prompt the model, draw its answer, correct it, submit it, go
// to the next sample. Data flows one way: study -> request -> reply -> drawn answer -> submitted label.
import * as api from './api.js';
import contract from './contract.json';
import { loadStudy, sniff } from './load.js';
import { readNrrd, writeNrrd } from './nrrd.js';
import * as view from './viewer.js';
import { initOverlay, itemsOf, setAnswerItems, setUserItems, redraw } from './answers.js';
import { bindKeys } from './keys.js';
import { buildRequest, labelInfo } from './requests.js';

const $ = (id) => document.getElementById(id);
const ui = {
  study: null, task: 'segment', tool: 'view', clicks: [], box: null, reply: null, labelNames: {},
  lastTiming: null, busy: false,
};
window.umind = { ui, view, imageToCanvas: view.imageToCanvas };

function message(text, ok = false) {
  const m = $('umind-message');
  m.textContent = text || '';
  m.className = ok ? 'ok' : '';
}
function fail(e) {
  message(e?.message || String(e));
  console.warn('umind:', e?.message || e);
}

async function guarded(fn) {
  if (ui.busy) return;
  ui.busy = true;
  document.body.classList.add('busy');
  try {
    message('');
    await fn();
  } catch (e) {
    fail(e);
  } finally {
    ui.busy = false;
    document.body.classList.remove('busy');
  }
}

function frameLabel() {
  const n = view.frameCount();
  $('umind-frame').textContent = n ? `${ui.study?.id ?? ''}  frame ${view.currentFrame() + 1}/${n}  (${ui.study?.unit ?? ''})` : '';
  redraw(view.currentFrame());
}

async function openStudy(id, frame = 0) {
  message(`opening ${id}...`, true);
  const bytes = await api.studyBytes(id);
  const study = await loadStudy(bytes);
  await view.showStack(study.imageIds, study);
  ui.study = { id, ...study };
  ui.reply = null;
  ui.labelNames = {};
  refreshLabels();
  ui.clicks = [];
  ui.box = null;
  setAnswerItems([]);
  setUserItems([]);
  $('umind-answer').value = '';
  $('umind-finding').value = '';
  if ($('umind-study').value !== id) {
    if (![...$('umind-study').options].some((o) => o.value === id)) $('umind-study').add(new Option(id, id));
    $('umind-study').value = id;
  }
  const url = new URL(location.href);
  url.searchParams.set('image', id);
  history.replaceState(null, '', url);
  if (frame) await view.setFrame(frame);
  frameLabel();
  message(`${id}: ${study.width}x${study.height}, ${study.imageIds.length} frame(s)`, true);
}

function applyMask(file, frame) {
  return file.arrayBuffer().then(readNrrd).then(({ sizes, data }) => {
    const [w, h] = sizes;
    if (w !== ui.study.width || h !== ui.study.height) {
      throw new Error(`the reply's label map is ${w}x${h}, the image ${ui.study.width}x${ui.study.height}`);
    }
    const n = w * h;
    const frames = sizes.length > 2 ? sizes[2] : 1;
    const k = frames === 1 ? 0 : frame;
    view.setFrameMask(frame, Uint8Array.from(data.subarray(k * n, (k + 1) * n)));
    view.maskChanged();
  });
}

/** The Paint label list: the study's label names (value order), the brush painting the selected one. */
function refreshLabels(select = null) {
  const entries = Object.entries(ui.labelNames).sort((a, b) => a[1] - b[1]);
  if (!entries.length) entries.push([$('umind-prompt').value.trim() || 'label 1', 1]);
  $('umind-label').replaceChildren(...entries.map(([name, v]) => new Option(`${v}: ${name}`, String(v))));
  const value = select ?? entries[0][1];
  $('umind-label').value = String(value);
  view.setActiveLabel(value);
}

function newLabel() {
  if (!ui.study) return;
  const values = Object.values(ui.labelNames);
  const value = (values.length ? Math.max(...values) : 0) + 1;
  if (value > 255) throw new Error('a label map holds at most 255 labels here');
  const typed = $('umind-prompt').value.trim();
  const name = typed && !(typed in ui.labelNames) ? typed : `label ${value}`;
  ui.labelNames[name] = value;
  refreshLabels(value);
  message(`the brush paints ${name} (${value})`, true);
}

function namesOf(params) {
  const ln = params.label_names ?? {};
  const out = {};
  for (const [k, v] of Object.entries(ln)) {
    if (typeof v === 'number') out[k] = v; else out[v] = Number(k);
  }
  return out;
}

async function run() {
  await guarded(async () => {
    if (!ui.study) throw new Error('open a study first');
    const t0 = performance.now();
    const frame = view.currentFrame();
    const req = buildRequest({ task: ui.task, prompt: $('umind-prompt').value.trim(), frame,
      clicks: ui.clicks, box: ui.box, frames: view.frameCount() });
    message(`running ${ui.task}...`, true);
    const { params, file } = await api.infer(req.model, ui.study.id, req.params, req.output);
    const t1 = performance.now();
    ui.reply = { task: ui.task, prompt: req.prompt, params, frame };
    if (file && (file.name || '').endsWith('.json')) ui.reply.markups = JSON.parse(await file.text());
    else if (file && sniff(await file.slice(0, 132).arrayBuffer()) === 'nrrd') await applyMask(file, frame);
    const names = namesOf(params);
    if (Object.keys(names).length) {
      // the reply's label map owns its values: names the study had for them before go
      const taken = new Set(Object.values(names));
      ui.labelNames = Object.fromEntries(Object.entries(ui.labelNames).filter(([, v]) => !taken.has(v)));
      Object.assign(ui.labelNames, names);
      refreshLabels(Math.min(...Object.values(names)));
    }
    setAnswerItems(itemsOf(params));
    const answer = params.answer ?? params.umind?.answer ?? params.umind?.results?.[0]?.answer ?? '';
    $('umind-answer').value = typeof answer === 'string' ? answer : JSON.stringify(answer);
    if (params.class && contract.findings.includes(params.class)) $('umind-finding').value = params.class;
    redraw(view.currentFrame());
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    ui.lastTiming = { request_ms: t1 - t0, total_ms: performance.now() - t0 };
    message(`${ui.task}: done in ${(ui.lastTiming.total_ms / 1000).toFixed(2)} s`
      + (params.umind?.version != null ? ` (version ${params.umind.version})` : ''), true);
  });
}

async function submit() {
  await guarded(async () => {
    if (!ui.study) throw new Error('open a study first');
    const masks = view.allMasks();
    const sizes = view.frameCount() > 1 ? [ui.study.width, ui.study.height, view.frameCount()]
      : [ui.study.width, ui.study.height];
    const info = labelInfo({ masks, labelNames: ui.labelNames, prompt: $('umind-prompt').value.trim(),
      reply: ui.reply, answer: $('umind-answer').value.trim(), finding: $('umind-finding').value });
    const out = await api.submitLabel(ui.study.id, writeNrrd(masks, sizes), info);
    const retrain = out?.retrain ?? out?.umind?.retrain ?? '';
    message(`label saved for ${ui.study.id}${retrain ? ` (retrain: ${typeof retrain === 'string' ? retrain : JSON.stringify(retrain)})` : ''}`, true);
    await status();
  });
}

async function next() {
  await guarded(async () => {
    const picked = await api.nextSample($('umind-strategy').value);
    if (!picked?.id) throw new Error('no unlabeled study is left for this strategy');
    await openStudy(picked.id);
  });
}

function fillStrategies(i) {
  const names = Object.keys(i.strategies ?? {});
  if ($('umind-strategy').options.length || !names.length) return;
  // the server's own list (its default strategy first)
  names.sort((a, b) => (b === 'umind_uncertainty') - (a === 'umind_uncertainty'));
  for (const s of names) $('umind-strategy').add(new Option(s, s));
}

async function status() {
  try {
    const i = await api.info();
    fillStrategies(i);
    const u = i.umind ?? {};
    const t = u.trigger ?? {};
    const lines = [`model ${u.model ?? '?'}, version ${u.current_version ?? '?'}${u.current_forced ? ' (rolled back)' : ''}`];
    if (t.since_last_run != null) {
      lines.push(`labels since last run ${t.since_last_run}${u.retrain_every ? ` of ${u.retrain_every}` : ' (retraining off)'}`);
    }
    const p = u.train_progress;
    if (p) lines.push(`training version ${p.version}: ${p.line ?? 'starting'}`);
    if (u.last_decision?.reason) lines.push(`last decision: ${u.last_decision.reason}`);
    $('umind-status').textContent = lines.join('\n');
  } catch (e) {
    $('umind-status').textContent = `status: ${e.message}`;
  }
}

function setTool(name) {
  ui.tool = name;
  for (const b of document.querySelectorAll('[data-tool]')) b.setAttribute('aria-pressed', String(b.dataset.tool === name));
  view.setPaintTool(name === 'brush' || name === 'eraser' ? name : null);
}

function drawUser() {
  const k = view.currentFrame();
  const items = ui.clicks.map((c) => ({ frame: c.frame, kind: 'point', point: [c.x, c.y], sign: c.sign }));
  if (ui.box) items.push({ frame: ui.box.frame, kind: 'box', box: ui.box.box });
  setUserItems(items);
  redraw(k);
}

function bindPointer(element) {
  let start = null;
  const toImage = (ev) => {
    const r = element.getBoundingClientRect();
    return view.canvasToImage(ev.clientX - r.left, ev.clientY - r.top);
  };
  const inside = ([x, y]) => x >= -0.5 && y >= -0.5 && x < ui.study.width - 0.5 && y < ui.study.height - 0.5;
  element.addEventListener('pointerdown', (ev) => {
    if (ev.button !== 0 || !ui.study || !['positive', 'negative', 'box'].includes(ui.tool)) return;
    ev.stopPropagation();
    start = toImage(ev);
    if (!inside(start)) {
      message('the click is outside the image');
      start = null;
    }
  }, true);
  element.addEventListener('pointerup', (ev) => {
    if (ev.button !== 0 || !start) return;
    ev.stopPropagation();
    const end = toImage(ev);
    const frame = view.currentFrame();
    if (ui.tool === 'box') {
      const clamp = (v, hi) => Math.max(0, Math.min(hi - 1, Math.round(v)));
      const x0 = clamp(Math.min(start[0], end[0]), ui.study.width); const x1 = clamp(Math.max(start[0], end[0]), ui.study.width);
      const y0 = clamp(Math.min(start[1], end[1]), ui.study.height); const y1 = clamp(Math.max(start[1], end[1]), ui.study.height);
      if (x1 > x0 && y1 > y0) ui.box = { frame, box: [x0, y0, x1, y1] };
    } else {
      ui.clicks.push({ frame, x: Math.round(start[0]), y: Math.round(start[1]), sign: ui.tool });
    }
    start = null;
    drawUser();
  }, true);
}

function fillControls() {
  for (const t of contract.tasks) $('umind-task').add(new Option(t.task, t.task));
  for (const f of contract.findings) $('umind-finding').add(new Option(f, f));
  const hint = () => {
    ui.task = $('umind-task').value;
    $('umind-prompt').placeholder = contract.tasks.find((t) => t.task === ui.task).hint;
  };
  $('umind-task').addEventListener('change', hint);
  hint();
  $('umind-run').addEventListener('click', run);
  $('umind-submit').addEventListener('click', submit);
  $('umind-next').addEventListener('click', next);
  $('umind-clear').addEventListener('click', () => { ui.clicks = []; ui.box = null; drawUser(); });
  $('umind-study').addEventListener('change', () => guarded(() => openStudy($('umind-study').value)));
  $('umind-overlay').addEventListener('change', () => view.setOverlayVisible($('umind-overlay').checked));
  $('umind-label').addEventListener('change', () => view.setActiveLabel(Number($('umind-label').value)));
  $('umind-new-label').addEventListener('click', () => guarded(async () => newLabel()));
  $('umind-brush-size').addEventListener('input', () => view.setBrushSize(Number($('umind-brush-size').value)));
  for (const b of document.querySelectorAll('[data-tool]')) b.addEventListener('click', () => setTool(b.dataset.tool));
}

async function startWork() {
  $('umind-login').hidden = true;
  $('umind-work').hidden = false;
  const list = await api.studies();
  const ids = Object.keys(list.objects ?? {}).sort();
  $('umind-study').replaceChildren(...ids.map((id) => new Option(id, id)));
  const params = new URLSearchParams(location.search);
  const id = params.get('image') || ids[0];
  status();
  setInterval(status, 10000);
  if (id) await openStudy(id, Number(params.get('frame') || 0));
  else message('the server has no studies yet');
}

async function boot() {
  const element = $('umind-viewport');
  element.addEventListener('contextmenu', (e) => e.preventDefault());
  const params = new URLSearchParams(location.search);
  await view.initViewer(element);
  initOverlay($('umind-stage'));
  view.onRendered(element, () => redraw(view.currentFrame()));
  view.onFrameChanged(element, frameLabel);
  fillControls();
  bindPointer(element);
  setTool('view');
  view.setBrushSize(10);
  bindKeys({ run, submit, next, tool: setTool, undo: () => { view.undo(); view.maskChanged(); },
    toggleMask: () => { $('umind-overlay').checked = !$('umind-overlay').checked; view.setOverlayVisible($('umind-overlay').checked); },
    brush: (d) => { const s = Math.max(1, view.brushSize() + d); $('umind-brush-size').value = s; view.setBrushSize(s); },
    frame: (d) => view.setFrame(view.currentFrame() + d) });
  const needLogin = (await api.authEnabled()) && !(api.token() && await api.call('/auth/token/valid').then(() => true, () => false));
  if (needLogin) {
    $('umind-login').hidden = false;
    $('umind-login').addEventListener('submit', (ev) => {
      ev.preventDefault();
      guarded(async () => {
        await api.login($('umind-user').value, $('umind-password').value);
        await startWork();
      });
    });
    return;
  }
  await startWork();
}

boot().catch(fail);
