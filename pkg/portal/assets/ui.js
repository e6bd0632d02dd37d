// ui.js: what every page of the portal shares: the header with the
// navigation, the problem notice and the confirmation dialog.
import {html, useEffect, useRef} from './vendor/preact-htm.js';
import * as api from './api.js';
import {t, lang, setLanguage} from './i18n.js';

// page is the shell's <body data-page>: the page shown.
export const page = document.body.dataset.page;

// userPages and adminPages are the navigation's links, in order (an admin
// sees both).
const userPages = [['catalogue', '/'], ['vms', '/vms'], ['storage', '/storage'], ['tasks', '/tasks'], ['book', '/book'], ['usage', '/usage'], ['rules', '/rules']];
const adminPages = [['fleet', '/admin/fleet'], ['admin', '/admin']];

// Header is the top of every page; simulated (the sign-in page's, from GET
// /v1/auth/methods) shows the simulated server's badge before anyone signs
// in, without the hosts' names, which the session gives.
export function Header({session, simulated = false}) {
  const out = async () => {
    try { await api.signOut(); } finally { location.assign('/login'); }
  };
  const link = ([name, href]) => html`<a href=${href} aria-current=${page === name ? 'page' : undefined}>${t('nav_' + name)}</a>`;
  const simHosts = (session && session.simulated_hosts) || [];
  const sim = simHosts.length > 0 || simulated;
  const simHint = simHosts.length > 0 ? t('simulatedHint', {hosts: simHosts.join(', ')}) : t('simulatedHintAny');
  return html`<header class="top">
    <div class="brand-row">
      <a class="brand" href="/">${t('brand')}</a>
      ${sim && html`<span class="sim" id="simulated" role="note" title=${simHint}>${t('simulated')}<span
        class="sr-only">: ${simHint}</span></span>`}
    </div>
    ${session && html`<nav aria-label=${t('nav')}>
      ${userPages.map(link)}
      ${session.user.admin && adminPages.map(link)}
    </nav>`}
    <div class="who">
      <label class="lang"><span class="lang-word">${t('language')}</span>
        <select value=${lang} onChange=${(e) => setLanguage(e.target.value)}>
          <option value="en">English</option><option value="zh-CN">简体中文</option>
        </select></label>
      ${session && html`<span class="user">${t('signedInAs', {user: session.user.name})}</span>
        <button type="button" class="quiet" id="sign-out" onClick=${out}>${t('signOut')}</button>`}
    </div>
  </header>`;
}

export function Problem({error}) {
  if (!error) return null;
  return html`<p class="notice error" role="alert">${t('error', {msg: error.message})}</p>`;
}

// Confirm asks before an action, in a modal <dialog> (Escape cancels):
// text is the question, yes the confirming button's words.
export function Confirm({text, yes, danger = false, onYes, onNo}) {
  const ref = useRef(null);
  useEffect(() => { const d = ref.current; d.showModal(); return () => d.open && d.close(); }, []);
  return html`<dialog ref=${ref} class="confirm" aria-labelledby="confirm-text" onCancel=${onNo}>
    <p id="confirm-text">${text}</p>
    <div class="buttons">
      <button type="button" class=${danger ? 'danger' : ''} id="confirm-yes" onClick=${onYes}>${yes}</button>
      <button type="button" class="quiet" onClick=${onNo} autofocus>${t('cancel')}</button>
    </div>
  </dialog>`;
}

// useEvents calls changed (at most every 200 ms) on any event of the
// given types from GET /v1/events, and setLive(true/false) as the stream
// connects and drops. The browser reconnects by itself unless the answer
// was not a stream (the session ended: 401), when session() goes to
// /login.
export function useEvents(types, changed, setLive, onError) {
  useEffect(() => {
    const es = new EventSource('/v1/events');
    let timer = 0;
    const fire = () => { if (!timer) timer = setTimeout(() => { timer = 0; changed(); }, 200); };
    for (const type of types) es.addEventListener(type, fire);
    es.onopen = () => setLive && setLive(true);
    es.onerror = () => {
      if (setLive) setLive(false);
      if (es.readyState === EventSource.CLOSED) api.session().catch(onError || (() => {}));
    };
    return () => { es.close(); clearTimeout(timer); };
  }, [changed]);
}
