// app.js: the gpuvm portal's pages, in Preact with htm's tagged templates
// (no build step). The page to show is the shell's <body data-page>.
import {html, render, useState, useEffect, useRef, useCallback} from './vendor/preact-htm.js';
import * as api from './api.js';
import {t, lang, setLanguage, stateWord, fmtTime, fmtRelative, fmtBytes, hoursOf, gpuWords, freeWords} from './i18n.js';

const page = document.body.dataset.page;

function Header({session}) {
  const out = async () => {
    try { await api.signOut(); } finally { location.assign('/login'); }
  };
  return html`<header class="top">
    <a class="brand" href="/">${t('brand')}</a>
    ${session && html`<nav aria-label=${t('nav')}>
      <a href="/" aria-current=${page === 'catalogue' ? 'page' : undefined}>${t('catalogue')}</a>
      <a href="/vms" aria-current=${page === 'vms' ? 'page' : undefined}>${t('vms')}</a>
    </nav>`}
    <div class="who">
      <label class="lang">${t('language')}
        <select value=${lang} onChange=${(e) => setLanguage(e.target.value)}>
          <option value="en">English</option><option value="zh-CN">简体中文</option>
        </select></label>
      ${session && html`<span class="user">${t('signedInAs', {user: session.user.name})}</span>
        <button type="button" class="quiet" id="sign-out" onClick=${out}>${t('signOut')}</button>`}
    </div>
  </header>`;
}

function Problem({error}) {
  if (!error) return null;
  return html`<p class="notice error" role="alert">${t('error', {msg: error.message})}</p>`;
}

// ---- /login

function Login() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    const field = e.target.elements.token;
    setBusy(true); setError(null);
    try {
      await api.signIn(field.value);
      field.value = '';
      location.assign('/');
    } catch (err) {
      setError(err); setBusy(false); field.focus();
    }
  };
  return html`<${Header} />
  <main id="main" tabindex="-1" class="narrow">
    <h1>${t('loginTitle')}</h1>
    <form method="post" action="/v1/session" onSubmit=${submit} class="card">
      <label for="token">${t('token')}</label>
      <input id="token" name="token" type="password" required autocomplete="off" spellcheck="false"
        aria-describedby="token-hint" autofocus />
      <p id="token-hint" class="hint">${t('tokenHint')}</p>
      <${Problem} error=${error} />
      <button type="submit" disabled=${busy}>${busy ? t('signingIn') : t('signIn')}</button>
    </form>
  </main>`;
}

// ---- / : the catalogue

function Catalogue({session}) {
  const [profiles, setProfiles] = useState(null);
  const [hosts, setHosts] = useState([]);
  const [error, setError] = useState(null);
  useEffect(() => {
    Promise.all([api.call('GET', '/v1/profiles'), api.call('GET', '/v1/hosts')])
      .then(([ps, hs]) => { setProfiles(ps); setHosts(hs.items || []); })
      .catch(setError);
  }, []);
  return html`<${Header} session=${session} />
  <main id="main" tabindex="-1">
    <h1>${t('catalogue')}</h1>
    <p class="intro">${t('catalogueIntro')}</p>
    <${Problem} error=${error} />
    ${profiles && profiles.length === 0 && html`<p class="notice">${t('noProfiles')}</p>`}
    <ul class="cards" aria-busy=${profiles === null}>
      ${(profiles || []).map((p) => html`<${ProfileCard} key=${p.name} p=${p} hosts=${hosts} />`)}
    </ul>
  </main>`;
}

function ProfileCard({p, hosts}) {
  const [asking, setAsking] = useState(false);
  const free = freeWords(p.gpu, hosts);
  const id = 'profile-' + p.name;
  const leaseDefault = hoursOf(p.lease.default), leaseMax = hoursOf(p.lease.max);
  return html`<li class="card profile" aria-labelledby=${id}>
    <h2 id=${id}>${gpuWords(p.gpu)}</h2>
    <p class="pname">${p.name}${p.description ? ' — ' + p.description : ''}</p>
    <dl class="facts">
      <div><dt>${t('vcpus')}</dt><dd>${p.vcpus}</dd></div>
      <div><dt>${t('memory')}</dt><dd>${fmtBytes(p.memory)}</dd></div>
      ${p.disk && p.disk.size ? html`<div><dt>${t('disk')}</dt><dd>${fmtBytes(p.disk.size)}</dd></div>` : null}
      <div><dt>${t('lease')}</dt><dd>${leaseMax ? t('leaseHours', {d: leaseDefault, m: leaseMax}) : t('leaseDefault', {d: leaseDefault})}</dd></div>
      <div><dt>${t('available')}</dt><dd class=${'free ' + (free.n === 0 ? 'none' : free.n > 0 ? 'some' : '')}>${free.text}</dd></div>
    </dl>
    ${asking
      ? html`<${AskForm} p=${p} onCancel=${() => setAsking(false)} />`
      : html`<button type="button" onClick=${() => setAsking(true)} aria-describedby=${id}>${t('ask')}</button>`}
  </li>`;
}

function AskForm({p, onCancel}) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const first = useRef(null);
  useEffect(() => first.current && first.current.focus(), []);
  const max = hoursOf(p.lease.max) || hoursOf(p.lease.default) || 1;
  const fid = (f) => `ask-${p.name}-${f}`;
  const submit = async (e) => {
    e.preventDefault();
    const f = e.target.elements;
    const body = {profile: p.name, hours: Number(f.hours.value)};
    if (f.name.value.trim()) body.name = f.name.value.trim();
    const keys = f.ssh.value.split('\n').map((k) => k.trim()).filter(Boolean);
    if (keys.length) body.ssh_keys = keys;
    setBusy(true); setError(null);
    try {
      const r = await api.call('POST', '/v1/vms', body);
      location.assign('/vms#vm-' + encodeURIComponent(r.vm.name));
    } catch (err) { setError(err); setBusy(false); }
  };
  return html`<form class="ask" onSubmit=${submit} aria-label=${t('askTitle', {p: p.name})}>
    <label for=${fid('name')}>${t('name')}</label>
    <input id=${fid('name')} name="name" ref=${first} pattern="[a-z][a-z0-9\\-]{0,62}" autocomplete="off"
      aria-describedby=${fid('name-hint')} />
    <p class="hint" id=${fid('name-hint')}>${t('nameHint')}</p>
    <label for=${fid('hours')}>${t('hours')}</label>
    <input id=${fid('hours')} name="hours" type="number" min="1" max=${max} value=${hoursOf(p.lease.default) || 1} required
      aria-describedby=${fid('hours-hint')} />
    <p class="hint" id=${fid('hours-hint')}>${t('hoursHint', {m: max})}</p>
    <label for=${fid('ssh')}>${t('sshKeys')}</label>
    <textarea id=${fid('ssh')} name="ssh" rows="3" spellcheck="false" aria-describedby=${fid('ssh-hint')}></textarea>
    <p class="hint" id=${fid('ssh-hint')}>${t('sshHint')}</p>
    <${Problem} error=${error} />
    <div class="buttons">
      <button type="submit" disabled=${busy}>${busy ? t('asking') : t('submit')}</button>
      <button type="button" class="quiet" onClick=${onCancel}>${t('cancel')}</button>
    </div>
  </form>`;
}

// ---- /vms : My VMs, live

const finished = (vm) => vm.state === 'deleted';

function VMs({session}) {
  const [vms, setVMs] = useState(null);
  const [details, setDetails] = useState({});
  const [error, setError] = useState(null);
  const [live, setLive] = useState(false);
  const [confirm, setConfirm] = useState(null);
  const [said, setSaid] = useState('');
  const [now, setNow] = useState(Date.now());

  const load = useCallback(async () => {
    try {
      const items = (await api.allVMs()).filter((vm) => !finished(vm));
      setVMs(items);
      // Addresses and the console are in GET /v1/vms/{id} only: read them
      // for the running VMs (a few at a time).
      const running = items.filter((vm) => vm.state === 'running').slice(0, 50);
      for (let i = 0; i < running.length; i += 4) {
        const got = await Promise.all(running.slice(i, i + 4).map((vm) => api.getVM(vm.id).catch(() => null)));
        setDetails((d) => { const n = {...d}; got.forEach((g) => g && (n[g.id] = g)); return n; });
      }
    } catch (err) { setError(err); }
  }, []);

  // When the list is first drawn (effects run after the paint): read by
  // BenchmarkMyVMs200.
  useEffect(() => { if (vms && !window.gpuvmRendered) window.gpuvmRendered = performance.now(); }, [vms]);

  useEffect(() => {
    load();
    // Any event of the caller's VMs: read the list again (at most every
    // 200 ms).
    const es = new EventSource('/v1/events');
    let timer = 0;
    const changed = () => { if (!timer) timer = setTimeout(() => { timer = 0; load(); }, 200); };
    for (const type of ['vm.created', 'vm.state', 'vm.action', 'vm.warning']) es.addEventListener(type, changed);
    es.onopen = () => setLive(true);
    es.onerror = () => {
      setLive(false);
      // The browser retries by itself, unless the answer was not a stream
      // (the session ended: 401): then session() goes to /login.
      if (es.readyState === EventSource.CLOSED) api.session().catch(setError);
    };
    const tick = setInterval(() => setNow(Date.now()), 30000);
    return () => { es.close(); clearInterval(tick); clearTimeout(timer); };
  }, [load]);

  const act = async (vm, action) => {
    setConfirm(null);
    try {
      if (action === 'delete') await api.deleteVM(vm.id);
      else await api.vmAction(vm.id, action);
      setSaid(t('done', {action: t(action), name: vm.name}));
      load();
    } catch (err) { setError(err); }
  };
  const desktop = async (vm) => {
    const w = window.open('', '_blank');
    try {
      const c = await api.consoleTicket(vm.id);
      if (w) { w.opener = null; w.location = c.browser_url; } else location.assign(c.browser_url);
    } catch (err) { if (w) w.close(); setError(err); }
  };

  return html`<${Header} session=${session} />
  <main id="main" tabindex="-1">
    <div class="title-row">
      <h1>${t('vms')}</h1>
      <span class=${'live ' + (live ? 'on' : 'off')} id="live">${live ? t('live') : t('offline')}</span>
    </div>
    <p class="intro">${t('vmsIntro')}</p>
    <${Problem} error=${error} />
    <p class="sr-only" role="status" aria-live="polite">${said}</p>
    ${vms && vms.length === 0 && html`<p class="notice">${t('noVMs')}</p>`}
    <ul class="vms" aria-busy=${vms === null}>
      ${(vms || []).map((vm) => html`<${VMCard} key=${vm.id} vm=${details[vm.id] && details[vm.id].updated_at === vm.updated_at ? details[vm.id] : vm}
        now=${now} onAct=${(a) => setConfirm({vm, action: a})} onDesktop=${() => desktop(vm)} />`)}
    </ul>
    ${confirm && html`<${Confirm} ...${confirm} onYes=${() => act(confirm.vm, confirm.action)} onNo=${() => setConfirm(null)} />`}
  </main>`;
}

function VMCard({vm, now, onAct, onDesktop}) {
  const id = 'vm-' + vm.name;
  const gpus = (vm.gpus || []).map((g) => [g.type || g.kind, g.address].filter(Boolean).join(' @ ')).join(', ');
  const addrs = (vm.addresses || []).map((a) => a.ip).join(', ');
  const busy = ['allocating', 'creating', 'stopping', 'deleting'].includes(vm.state);
  return html`<li class="card vm" id=${id} data-state=${vm.state} aria-labelledby=${id + '-name'}>
    <div class="vm-head">
      <h2 id=${id + '-name'}>${vm.name}</h2>
      <span class=${'state s-' + vm.state} data-testid="state">${stateWord(vm.state)}${vm.phase ? ' · ' + vm.phase : ''}</span>
    </div>
    ${vm.reason && html`<p class="reason">${vm.reason}${vm.queue_position ? ' (' + t('queuePos', {n: vm.queue_position}) + ')' : ''}</p>`}
    <dl class="facts">
      <div><dt>${t('profile')}</dt><dd>${vm.profile}</dd></div>
      <div><dt>${t('gpu')}</dt><dd>${gpus || t('none')}</dd></div>
      <div><dt>${t('leaseEnd')}</dt><dd>${vm.lease_end
        ? html`<time datetime=${vm.lease_end}>${fmtTime(vm.lease_end)}</time> (${fmtRelative(vm.lease_end, now)})` : t('none')}</dd></div>
      <div><dt>${t('addresses')}</dt><dd>${addrs || t('none')}</dd></div>
    </dl>
    <div class="buttons" role="group" aria-label=${t('actions', {name: vm.name})}>
      ${vm.state === 'running' && vm.console && html`<button type="button" onClick=${onDesktop}>${t('openDesktop')}</button>`}
      ${vm.state === 'running' && html`<button type="button" class="quiet" onClick=${() => onAct('stop')}>${t('stop')}</button>`}
      ${vm.state === 'stopped' && html`<button type="button" onClick=${() => onAct('start')}>${t('start')}</button>`}
      ${!busy && html`<button type="button" class="danger" onClick=${() => onAct('delete')}>${t('delete')}</button>`}
    </div>
  </li>`;
}

// Confirm asks before an action, in a modal <dialog> (Escape cancels).
function Confirm({vm, action, onYes, onNo}) {
  const ref = useRef(null);
  useEffect(() => { const d = ref.current; d.showModal(); return () => d.open && d.close(); }, []);
  const text = t({stop: 'confirmStop', start: 'confirmStart', delete: 'confirmDelete'}[action], {name: vm.name});
  return html`<dialog ref=${ref} class="confirm" aria-labelledby="confirm-text" onCancel=${onNo}>
    <p id="confirm-text">${text}</p>
    <div class="buttons">
      <button type="button" class=${action === 'delete' ? 'danger' : ''} id="confirm-yes" onClick=${onYes}>${t('confirm', {action: t(action).toLowerCase()})}</button>
      <button type="button" class="quiet" onClick=${onNo} autofocus>${t('cancel')}</button>
    </div>
  </dialog>`;
}

// ---- start

async function main() {
  const root = document.getElementById('app');
  if (page === 'login') { render(html`<${Login} />`, root); return; }
  let session;
  try { session = await api.session(); } catch (err) {
    render(html`<${Header} /><main id="main"><${Problem} error=${err} /></main>`, root);
    return;
  }
  const Page = page === 'vms' ? VMs : Catalogue;
  render(html`<${Page} session=${session} />`, root);
}

main();
