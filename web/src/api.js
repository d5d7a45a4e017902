// The server's API as the viewer calls it. Every failure becomes an ApiError whose message names the problem
// (the server's 4xx `detail`, a lost connection), so the panel can show it instead of a blank viewer.
import contract from './contract.json';

const TOKEN_KEY = 'umind.token';

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

export const token = () => sessionStorage.getItem(TOKEN_KEY);
export const setToken = (t) => (t ? sessionStorage.setItem(TOKEN_KEY, t) : sessionStorage.removeItem(TOKEN_KEY));

async function detailOf(resp) {
  const text = await resp.text();
  try {
    const body = JSON.parse(text);
    const d = body.detail ?? body;
    return typeof d === 'string' ? d : JSON.stringify(d);
  } catch {
    return text.slice(0, 300) || resp.statusText;
  }
}

export async function call(path, { method = 'GET', body, headers = {} } = {}) {
  const h = { ...headers };
  if (token()) h.Authorization = `Bearer ${token()}`;
  let resp;
  try {
    resp = await fetch(path, { method, body, headers: h });
  } catch (e) {
    throw new ApiError(`the server cannot be reached (${e.message}): is it still running?`, 0);
  }
  if (!resp.ok) {
    const detail = await detailOf(resp);
    const hint = resp.status === 401 ? ' (log in again)' : '';
    throw new ApiError(`${resp.status}: ${detail}${hint}`, resp.status);
  }
  return resp;
}

/** {enabled} of MONAI Label's auth; a server without the route has auth off. */
export async function authEnabled() {
  try {
    return Boolean((await (await call('/auth/')).json()).enabled);
  } catch (e) {
    if (e.status === 404) return false;
    throw e;
  }
}

export async function login(username, password) {
  const body = new URLSearchParams({ username, password });
  let resp;
  try {
    resp = await call('/auth/token', { method: 'POST', body });
  } catch (e) {
    setToken(null);
    if (e.status === 401 || e.status === 400) throw new ApiError('wrong user name or password', e.status);
    throw e;
  }
  const t = (await resp.json()).access_token;
  if (!t) throw new ApiError('the server gave no token', 500);
  setToken(t);
}

export const studies = async () => (await call('/datastore/?output=all')).json();
export const studyBytes = async (id) => (await call(`/datastore/image?image=${encodeURIComponent(id)}`)).arrayBuffer();
export const info = async () => (await call('/info/')).json();

/** A task's reply: {params, file} (file: a Blob of the label map or markups, or null for JSON-only replies). */
export async function infer(model, id, params, output = 'all') {
  const form = new FormData();
  form.append('params', JSON.stringify({ ...params, [contract.client_marker[0]]: contract.client_marker[1] }));
  const resp = await call(`/infer/${model}?image=${encodeURIComponent(id)}&output=${output}`,
    { method: 'POST', body: form });
  const type = resp.headers.get('content-type') || '';
  if (type.startsWith('multipart/')) {
    const parts = await resp.formData();
    const p = parts.get('params');
    const params = JSON.parse(typeof p === 'string' ? p : await p.text());
    const file = parts.get('image');
    return { params, file: file && typeof file !== 'string' ? file : null };
  }
  if (type.includes('json')) return { params: await resp.json(), file: null };
  return { params: {}, file: await resp.blob() };
}

/** PUT the final label with its label info; the reply says whether a retrain counts, starts or waits. */
export async function submitLabel(id, labelBytes, labelInfo) {
  const form = new FormData();
  form.append('label', new Blob([labelBytes], { type: 'application/octet-stream' }), 'label.nrrd');
  form.append('params', JSON.stringify(labelInfo));
  const resp = await call(`/datastore/label?image=${encodeURIComponent(id)}&tag=final`, { method: 'PUT', body: form });
  return resp.json();
}

export async function nextSample(strategy) {
  const resp = await call(`/activelearning/${encodeURIComponent(strategy)}`, {
    method: 'POST', body: JSON.stringify({}), headers: { 'Content-Type': 'application/json' },
  });
  return resp.json();
}
