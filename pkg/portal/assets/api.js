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

// allVMs reads every page of GET /v1/vms: one person's (owner; an admin's
// list is everybody's without it).
export async function allVMs(owner = '') {
  let items = [], after = '';
  for (;;) {
    const page = await call('GET', '/v1/vms?limit=1000' + (owner ? '&owner=' + encodeURIComponent(owner) : '') +
      (after ? '&after=' + encodeURIComponent(after) : ''));
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

// pages/rules.js: the rules of sharing, written in the page's language.
export const getRules = (l) => call('GET', '/v1/rules?lang=' + encodeURIComponent(l));
// My VMs (pages/vms.js): extend a lease, the one-time desktop password, and
// the .rdp file of an RDP desktop (text, not JSON).
export const extendVM = (id, hours) => call('POST', vmPath(id) + '/actions/extend', {hours});
export const vmCredentials = (id) => call('POST', vmPath(id) + '/credentials'); // spends it: a POST, with the CSRF token
export async function desktopRDP(id) {
  const r = await fetch(vmPath(id) + '/desktop.rdp', {credentials: 'same-origin', cache: 'no-store'});
  if (r.status === 401) {
    location.assign('/login');
    throw new APIError(401, {detail: 'signed out'});
  }
  if (!r.ok) throw new APIError(r.status, await r.json().catch(() => null));
  return r.text();
}
// catalogue: the SSH keys a user keeps, and the policy's answer to an ask.
const userPath = (name) => '/v1/users/' + encodeURIComponent(name);
export const sshKeys = (user) => call('GET', userPath(user) + '/ssh-keys');
export const setSSHKeys = (user, keys) => call('PUT', userPath(user) + '/ssh-keys', {keys});
export const admission = (profile, hours) =>
  call('GET', '/v1/profiles/' + encodeURIComponent(profile) + '/admission?hours=' + encodeURIComponent(hours));
// book (pages/book.js): free capacity per hour, the caller's bookings,
// booking and cancelling.
export const bookingCapacity = (profile, from, to) => call('GET', '/v1/reservations/capacity?profile=' + encodeURIComponent(profile) +
  '&from=' + encodeURIComponent(from.toISOString()) + '&to=' + encodeURIComponent(to.toISOString()) + '&step=1h');
export const reservations = () => call('GET', '/v1/reservations');
export const book = (body) => call('POST', '/v1/reservations', body);
export const cancelReservation = (id) => call('DELETE', '/v1/reservations/' + encodeURIComponent(id));

// usage (pages/usage.js): the caller's GPU-hours by day, week and month.
export const usagePeriods = () => call('GET', '/v1/usage/periods');
// login.js: the ways of signing in, and the password sign-in (a cookie
// session, as with a token).
export const authMethods = () => call('GET', '/v1/auth/methods', undefined, {signingIn: true});

export async function signInPassword(username, password) {
  const s = await call('POST', '/v1/session', {username, password}, {signingIn: true});
  csrf = s.csrf_token;
  return s;
}




// --- fleet and admin pages (pages/fleet.js, pages/admin.js) ---
const enc = encodeURIComponent;
export const hosts = () => call('GET', '/v1/hosts');
export const drainGPU = (addr) => call('POST', '/v1/admin/gpus/' + enc(addr) + '/drain', {});
export const undrainGPU = (addr) => call('DELETE', '/v1/admin/gpus/' + enc(addr) + '/drain');
export const drainHost = (name) => call('POST', '/v1/admin/hosts/' + enc(name) + '/drain');
export const undrainHost = (name) => call('DELETE', '/v1/admin/hosts/' + enc(name) + '/drain');
export const users = () => call('GET', '/v1/users');
export const createUser = (u) => call('POST', '/v1/users', u);
export const tokens = (user) => call('GET', '/v1/users/' + enc(user) + '/tokens');
export const createToken = (user, body) => call('POST', '/v1/users/' + enc(user) + '/tokens', body);
export const revokeToken = (user, id) => call('DELETE', '/v1/users/' + enc(user) + '/tokens/' + enc(id));
export const queuedVMs = () => call('GET', '/v1/vms?state=queued&limit=1000');
export const alerts = () => call('GET', '/v1/alerts?limit=100');
export const reload = () => call('POST', '/v1/admin/reload');
// query: {user, action, after}; empty values are left out.
export const audit = (query) => call('GET', '/v1/admin/audit?' + new URLSearchParams(Object.entries({limit: 50, ...query}).filter(([, v]) => v)));
export const reportSummary = (from, to) => call('GET', '/v1/reports/summary?' + new URLSearchParams({from, to}));

// --- My storage (pages/storage.js): the caller's home and data disks, the
// shares they may mount, their VMs' snapshots ---
const volPath = (id) => '/v1/volumes/' + enc(id);
export const volumes = () => call('GET', '/v1/volumes');
export const createVolume = (name, size) => call('POST', '/v1/volumes', {name, size});
export const resizeVolume = (id, size) => call('POST', volPath(id) + '/actions/resize', {size});
// operation reads one operation of the caller's VMs (a disk plugged into a
// running VM answers with its id).
export const operation = (id) => call('GET', '/v1/operations/' + encodeURIComponent(id));
export const attachVolume = (id, vm) => call('POST', volPath(id) + '/actions/attach', {vm});
export const detachVolume = (id) => call('POST', volPath(id) + '/actions/detach');
export const deleteVolume = (id) => call('DELETE', volPath(id));
export const shares = () => call('GET', '/v1/shares');
export const homes = () => call('GET', '/v1/homes');
// deleteHome deletes user's home and everything in it; confirm is the
// person's name typed again.
export const deleteHome = (user, confirm) => call('DELETE', '/v1/homes/' + enc(user) + '?confirm=' + enc(confirm));
const snapPath = (vm) => vmPath(vm) + '/snapshots';
export const snapshots = (vm) => call('GET', snapPath(vm));
export const takeSnapshot = (vm, label) => call('POST', snapPath(vm), {label});
export const restoreSnapshot = (vm, id) => call('POST', snapPath(vm) + '/' + enc(id) + '/restore');
export const deleteSnapshot = (vm, id) => call('DELETE', snapPath(vm) + '/' + enc(id));

// --- Tasks (pages/tasks.js): submit, list (newest first), one, cancel, and
// the output (text, followed as it comes) ---
const taskPath = (id) => '/v1/tasks/' + enc(id);
export const profiles = () => call('GET', '/v1/profiles');
export const tasks = (limit) => call('GET', '/v1/tasks?limit=' + enc(limit));
export const task = (id) => call('GET', taskPath(id));
export const submitTask = (body) => call('POST', '/v1/tasks', body);
export const cancelTask = (id) => call('POST', taskPath(id) + '/cancel');

// taskLogs reads a task's output from offset (bytes), calling onText with
// each piece as it comes; with follow the answer goes on until the task
// has ended. It resolves with the offset reached; signal stops it.
export async function taskLogs(id, offset, follow, onText, signal) {
  const r = await fetch(taskPath(id) + '/logs?offset=' + offset + (follow ? '&follow=1' : ''),
    {credentials: 'same-origin', cache: 'no-store', signal});
  if (r.status === 401) {
    location.assign('/login');
    throw new APIError(401, {detail: 'signed out'});
  }
  if (!r.ok) throw new APIError(r.status, await r.json().catch(() => null));
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    offset += value.length;
    const text = dec.decode(value, {stream: true});
    if (text) onText(text);
  }
  const rest = dec.decode();
  if (rest) onText(rest);
  return offset;
}

// canRunTask: whether a task may run in profile p (GET /v1/profiles): one
// with a GPU and a cloud-init seed (the runner comes in it), Linux, and
// makeable here. The catalogue's "Run a task" and the Tasks page's
// profiles follow it.
export const canRunTask = (p) => !!(p && p.gpu && p.cloud_init && p.os !== 'windows' && !p.unavailable && !p.unservable);
