// The model's non-mask answers drawn over the frame: boxes, points, caliper lines and ellipses (with their length
// in mm where the server measured one), the user's own clicks and box. One SVG layer over the viewport, redrawn
// on every render from image coordinates, so zoom, pan and frame changes keep them in place.
import { imageToCanvas } from './viewer.js';

const NS = 'http://www.w3.org/2000/svg';
let svg = null;
let items = []; // {frame, kind, ...}

export function initOverlay(container) {
  svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('class', 'umind-answers');
  container.appendChild(svg);
}

function el(name, attrs, text) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  svg.appendChild(e);
  return e;
}

/** The results of a reply as drawable items (frame, kind, image coordinates, label, length in mm). */
export function itemsOf(params) {
  const results = params?.umind?.results ?? params?.results ?? [];
  const out = [];
  for (const r of results) {
    const frame = r.frame_index ?? 0;
    for (const o of r.objects ?? []) {
      const ph = o.physical ?? {};
      const label = o.label ?? '';
      if (o.box) out.push({ frame, kind: 'box', box: o.box, label });
      if (o.line) out.push({ frame, kind: 'line', line: o.line, label, length: ph.length, unit: ph.length_unit });
      if (o.ellipse) {
        out.push({ frame, kind: 'ellipse', ellipse: o.ellipse, label, length: ph.perimeter, unit: ph.perimeter_unit });
      }
      for (const p of o.points ?? []) out.push({ frame, kind: 'point', point: p, label });
    }
  }
  return out;
}

export function setAnswerItems(list) {
  items = items.filter((i) => i.user).concat(list);
}
export function setUserItems(list) {
  items = items.filter((i) => !i.user).concat(list.map((i) => ({ ...i, user: true })));
}

// the length as the server measured it (mm from the image's calibration, else px), to one decimal
const withLength = (it) => (it.length != null ? `${it.label} ${Number(it.length).toFixed(1)} ${it.unit ?? 'px'}` : it.label);

function pt(x, y) {
  const c = imageToCanvas(x, y);
  return [c[0], c[1]];
}

export function redraw(frame) {
  if (!svg) return;
  svg.replaceChildren();
  for (const it of items.filter((i) => i.frame === frame)) {
    const cls = it.user ? `user ${it.kind} ${it.sign ?? ''}` : `answer ${it.kind}`;
    if (it.kind === 'box') {
      const [x0, y0, x1, y1] = it.box;
      const a = pt(x0, y0); const b = pt(x1, y1);
      el('rect', { class: cls, x: Math.min(a[0], b[0]), y: Math.min(a[1], b[1]),
        width: Math.abs(b[0] - a[0]), height: Math.abs(b[1] - a[1]), 'data-box': it.box.join(',') });
      if (it.label) el('text', { class: 'label', x: Math.min(a[0], b[0]), y: Math.min(a[1], b[1]) - 4 }, it.label);
    } else if (it.kind === 'point') {
      const a = pt(...it.point);
      el('circle', { class: cls, cx: a[0], cy: a[1], r: 4, 'data-point': it.point.join(',') });
      if (it.label) el('text', { class: 'label', x: a[0] + 6, y: a[1] - 6 }, it.label);
    } else if (it.kind === 'line') {
      const [x1, y1, x2, y2] = it.line;
      const a = pt(x1, y1); const b = pt(x2, y2);
      el('line', { class: cls, x1: a[0], y1: a[1], x2: b[0], y2: b[1], 'data-line': it.line.join(',') });
      el('text', { class: 'label length', x: b[0] + 6, y: b[1] }, withLength(it));
    } else if (it.kind === 'ellipse') {
      // two axis lines (x1 y1 x2 y2 each), as umind_core.answers.landmarks.ellipse_outline reads them
      const [a1, b1, a2, b2, c1, d1, c2, d2] = it.ellipse;
      const cx = (a1 + a2) / 2; const cy = (b1 + b2) / 2;
      const u = [(a2 - a1) / 2, (b2 - b1) / 2]; const v = [(c2 - c1) / 2, (d2 - d1) / 2];
      const pts = [];
      for (let k = 0; k < 64; k++) {
        const t = (2 * Math.PI * k) / 64;
        pts.push(pt(cx + Math.cos(t) * u[0] + Math.sin(t) * v[0], cy + Math.cos(t) * u[1] + Math.sin(t) * v[1]).join(','));
      }
      el('polygon', { class: cls, points: pts.join(' ') });
      const a = pt(cx, cy);
      el('text', { class: 'label length', x: a[0], y: a[1] }, withLength(it));
    }
  }
}
