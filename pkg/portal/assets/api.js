// api.js: the portal's calls to the gpuvm REST API, with the session
// cookie (sent by the browser, never readable here) and the session's CSRF
// token on every state-changing request.

let csrf = '';

export class APIError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }
}

// call sends one request; a 401 (the session ended) goes to /login unless
// the caller is signing in.
export async function call(method, path, body, {signingIn = false} = {}) {
  const headers = {Accept: 'application/json'};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && csrf) headers['X-CSRF-Token'] = csrf;
  const r = await fetch(path, {
    method, headers, credentials: 'same-origin', cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (r.status === 401 && !signingIn) {
    location.assign('/login');
    throw new APIError(401, {detail: 'signed out'});
  }
  const data = r.status === 204 ? null : await r.json().catch(() => null);
  if (!r.ok) throw new APIError(r.status, data);
  return data;
}

// session reads the caller's session and keeps its CSRF token.
export async function session() {
  const s = await call('GET', '/v1/session');
  csrf = s.csrf_token;
  return s;
}

export async function signIn(token) {
  const s = await call('POST', '/v1/session', {token}, {signingIn: true});
  csrf = s.csrf_token;
  return s;
}

export async function signOut() {
  await call('DELETE', '/v1/session');
  csrf = '';
}

// allVMs reads every page of GET /v1/vms.
export async function allVMs() {
  let items = [], after = '';
  for (;;) {
    const page = await call('GET', '/v1/vms?limit=1000' + (after ? '&after=' + encodeURIComponent(after) : ''));
    items = items.concat(page.items || []);
    if (!page.next) return items;
    after = page.next;
  }
}

const vmPath = (id) => '/v1/vms/' + encodeURIComponent(id);
export const getVM = (id) => call('GET', vmPath(id));
export const vmAction = (id, action) => call('POST', vmPath(id) + '/actions/' + action);
export const deleteVM = (id) => call('DELETE', vmPath(id));
export const consoleTicket = (id) => call('GET', vmPath(id) + '/console');

// login.js: the ways of signing in, and the password sign-in (a cookie
// session, as with a token).
export const authMethods = () => call('GET', '/v1/auth/methods', undefined, {signingIn: true});

export async function signInPassword(username, password) {
  const s = await call('POST', '/v1/session', {username, password}, {signingIn: true});
  csrf = s.csrf_token;
  return s;
}
