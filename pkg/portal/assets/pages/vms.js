// pages/vms.js: /vms, the caller's VMs, live over the events stream, with
// their actions.
import {html, useState, useEffect, useCallback} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t, stateWord, fmtTime, fmtRelative} from '../i18n.js';
import {Header, Problem, Confirm, useEvents} from '../ui.js';

const finished = (vm) => vm.state === 'deleted';

export default function VMs({session}) {
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

  useEffect(() => { load(); }, [load]);
  // Any event of the caller's VMs: read the list again.
  useEvents(['vm.created', 'vm.state', 'vm.action', 'vm.warning'], load, setLive, setError);
  useEffect(() => {
    const tick = setInterval(() => setNow(Date.now()), 30000);
    return () => clearInterval(tick);
  }, []);

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
    ${confirm && html`<${Confirm} text=${confirmText(confirm)} danger=${confirm.action === 'delete'}
      yes=${t('confirm', {action: t(confirm.action).toLowerCase()})} onYes=${() => act(confirm.vm, confirm.action)} onNo=${() => setConfirm(null)} />`}
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

const confirmText = ({vm, action}) => t({stop: 'confirmStop', start: 'confirmStart', delete: 'confirmDelete'}[action], {name: vm.name});
