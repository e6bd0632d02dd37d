// pages/catalogue.js: /, the profiles the caller may use as cards, with
// what is free now, and the form that asks for a VM.
import {html, useState, useEffect, useRef} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t, fmtBytes, hoursOf, gpuWords, freeWords} from '../i18n.js';
import {Header, Problem} from '../ui.js';

export default function Catalogue({session}) {
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
