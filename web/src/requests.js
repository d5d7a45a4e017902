// What the panel's state asks the server (the request of a task) and what a submitted label says about itself
// (the label info the Slicer module sends too). Pure functions: node --test checks them without a browser.
import contract from './contract.json';

const KEYS = contract.label_info_keys;

/** {model, params, output, prompt} of a run; an Error naming what the panel lacks. */
export function buildRequest({ task, prompt, frame, clicks = [], box = null, frames = 1 }) {
  const preset = contract.tasks.find((t) => t.task === task);
  if (!preset) throw new Error(`unknown task ${task}`);
  if (preset.needs_prompt && !prompt) throw new Error(`${task}: type a question first`);
  const params = { result_extension: '.nrrd' };
  if (frames > 1 || frame) {
    params.frames = 'current';
    params.slice = frame;
  }
  let model = preset.model;
  const here = clicks.filter((c) => c.frame === frame);
  const roi = box && box.frame === frame ? box.box : null;
  if (task === 'segment' && (here.length || roi)) {
    model = contract.interactive_model;
    params.foreground = here.filter((c) => c.sign === 'positive').map((c) => [c.x, c.y, frame]);
    params.background = here.filter((c) => c.sign === 'negative').map((c) => [c.x, c.y, frame]);
    if (roi) params.roi = [roi[0], roi[2], roi[1], roi[3], frame, frame];
    params.slice = frame;
  } else if (clicks.length || box) {
    if (task !== 'segment') throw new Error(`${task} takes no clicks or box: clear them, or choose segment`);
  }
  if (preset.model === 'umind_landmarks' || preset.model === 'umind_interpret') params.task = preset.server_task;
  if (prompt) params[preset.prompt_key] = prompt;
  return { model, params, output: preset.output, prompt };
}

/** The label info of a submitted label: label names of the values present, and the corrected answer. */
export function labelInfo({ masks, labelNames = {}, prompt = '', reply = null, answer = '', finding = '' }) {
  const info = {};
  const present = new Set();
  for (let i = 0; i < masks.length; i++) if (masks[i]) present.add(masks[i]);
  const names = Object.fromEntries(Object.entries(labelNames).filter(([, v]) => present.has(v)));
  for (const v of present) {
    if (!Object.values(names).includes(v)) names[v === 1 && prompt && !Object.keys(names).includes(prompt) ? prompt : `label ${v}`] = v;
  }
  if (present.size) info[KEYS.label_names] = names;
  if (answer) info[KEYS.answer] = answer;
  if (finding) {
    if (!contract.findings.includes(finding)) throw new Error(`finding must be one of ${contract.findings.join(', ')}`);
    info[KEYS.finding] = finding;
  }
  const markups = reply?.markups ?? reply?.params?.markups;
  if (markups && typeof markups === 'object') info[KEYS.markups] = markups;
  if (reply?.task === 'report' && answer) info[KEYS.report] = answer;
  if (reply?.task === 'landmarks' && reply.prompt) info[KEYS.landmark_target] = reply.prompt;
  if (!Object.keys(info).length) throw new Error('nothing to submit: paint a mask, or run a task and correct its answer');
  return info;
}
