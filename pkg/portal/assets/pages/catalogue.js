// pages/catalogue.js: /, the profiles the caller may use as cards, with
// what is free now (or when the next one is expected, or that none here
// can ever serve it), and the form that asks for a VM: now or at a time,
// with the SSH keys the user keeps and the policy's answer before asking.
import {html, useState, useEffect, useRef} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t, addWords, lang, sentences, fmtBytes, fmtTime, hoursOf, gpuWords, freeWords} from '../i18n.js';
import {Header, Problem} from '../ui.js';

addWords({
  en: {
    unservable: 'not available here', unservableWhy: 'No GPU of this server can ever give it: {why}',
    unavailable: 'not available now', unavailableWhy: 'This server cannot make it now: {why}',
    nextFree: 'none free: the next one is expected about {time}',
    when: 'Start', startNow: 'now', startLater: 'at a time', startAt: 'Start at',
    startAtHint: 'Your local time. The VM waits in the queue until then, then for a GPU.',
    startAtPast: 'Choose a time in the future.',
    keysSaved: 'Your saved keys are filled in.', rememberKeys: 'Remember these keys for my next VMs',
    policy: 'What the rules say', policyLoading: 'Asking the rules…',
    policyStarts: 'The rules let it start now, when a GPU is free.',
    policyWaits: 'It would wait: {reason}', policyRefused: 'It would be refused: {reason}',
    quotaVMs: 'at most {n} VMs at once', quotaGPUs: 'at most {n} whole GPUs at once',
    quotaSlices: 'at most {n} vGPUs or MIG slices at once', quotaMemory: 'at most {mem} of GPU memory at once',
    budget_day: 'today: {used} of {limit} GPU-hours used, {left} left',
    budget_week: 'this week: {used} of {limit} GPU-hours used, {left} left',
    budget_month: 'this month: {used} of {limit} GPU-hours used, {left} left',
    budgetNoUsage: '{limit} GPU-hours a {unit}', unit_day: 'day', unit_week: 'week', unit_month: 'month',
    noQuota: 'No quota limits you.', yourQuota: 'Your quota',
    windowNow: 'Time window now: {name}, until {end}.', windowAllows: 'This machine may start in it.',
    windowForbids: 'This machine may not start in it.', noWindow: 'No time window applies now.',
    runTask: 'Run a task',
    shares: 'Shares to mount', sharesHint: 'Mounted in the VM when it starts. You may change files in a read-write share, only read a read-only one.',
    sharesAlways: 'This profile mounts {names} always.',
    shareRW: 'read-write', shareRO: 'read-only', shareAt: '{mode}, at {mount}',
    shareUnavailable: 'not available on this host now: a VM with it does not start',
    disks: 'Data disks to attach', disksHint: 'A data disk is attached to one VM at a time: this one, until you detach it on My storage.',
    diskOption: '{name}, {size}',
  },
  'zh-CN': {
    unservable: '此处不可用', unservableWhy: '这台服务器上没有任何 GPU 能提供它：{why}',
    unavailable: '暂不可用', unavailableWhy: '这台服务器现在无法创建它：{why}',
    nextFree: '没有空闲：预计下一个约在 {time} 空出',
    when: '开始', startNow: '现在', startLater: '指定时间', startAt: '开始时间',
    startAtHint: '你的本地时间。虚拟机在此之前排队等待，之后等待 GPU。',
    startAtPast: '请选择将来的时间。',
    keysSaved: '已填入你保存的公钥。', rememberKeys: '为我以后的虚拟机记住这些公钥',
    policy: '规则怎么说', policyLoading: '正在查询规则…',
    policyStarts: '规则允许它现在开始（有空闲 GPU 时）。',
    policyWaits: '它将等待：{reason}', policyRefused: '它将被拒绝：{reason}',
    quotaVMs: '同时最多 {n} 台虚拟机', quotaGPUs: '同时最多 {n} 块整块 GPU',
    quotaSlices: '同时最多 {n} 个虚拟 GPU 或 MIG 切片', quotaMemory: '同时最多 {mem} GPU 显存',
    budget_day: '今天：已用 {used} / {limit} GPU 小时，剩余 {left}',
    budget_week: '本周：已用 {used} / {limit} GPU 小时，剩余 {left}',
    budget_month: '本月：已用 {used} / {limit} GPU 小时，剩余 {left}',
    budgetNoUsage: '每{unit} {limit} GPU 小时', unit_day: '天', unit_week: '周', unit_month: '月',
    noQuota: '你没有配额限制。', yourQuota: '你的配额',
    windowNow: '当前时间窗口：{name}，至 {end}。', windowAllows: '这台机器可以在此窗口内开始。',
    windowForbids: '这台机器不能在此窗口内开始。', noWindow: '当前没有适用的时间窗口。',
    runTask: '运行任务',
    shares: '要挂载的共享', sharesHint: '虚拟机启动时挂载。读写共享中的文件可以修改，只读共享只能读取。',
    sharesAlways: '此配置总是挂载 {names}。',
    shareRW: '读写', shareRO: '只读', shareAt: '{mode}，挂载于 {mount}',
    shareUnavailable: '此宿主机上目前不可用：带有它的虚拟机无法启动',
    disks: '要挂接的数据盘', disksHint: '数据盘每次只挂接到一台虚拟机：挂接到这台，直到你在“我的存储”中卸下它。',
    diskOption: '{name}，{size}',
  },
});

const clock = new Intl.DateTimeFormat(lang, {hour: '2-digit', minute: '2-digit'});
const dayClock = new Intl.DateTimeFormat(lang, {weekday: 'short', day: 'numeric', month: 'short', hour: '2-digit', minute: '2-digit'});

// aboutTime is when the next GPU is expected: the clock alone today, with
// the day otherwise; in the viewer's time zone.
export function aboutTime(iso, now = new Date()) {
  const d = new Date(iso);
  return d.toDateString() === now.toDateString() ? clock.format(d) : dayClock.format(d);
}

const hoursText = (h) => String(Math.round(h * 100) / 100);

// localInput is a datetime-local value (the viewer's time) of a Date.
function localInput(d) {
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

export default function Catalogue({session}) {
  const [profiles, setProfiles] = useState(null);
  const [hosts, setHosts] = useState([]);
  const [keys, setKeys] = useState([]);
  const [error, setError] = useState(null);
  const me = session.user.name;
  const load = () => Promise.all([api.call('GET', '/v1/profiles'), api.call('GET', '/v1/hosts')])
    .then(([ps, hs]) => { setProfiles(ps); setHosts(hs.items || []); })
    .catch(setError);
  useEffect(() => {
    load();
    // Kept keys are a help, not a need: a server without them fills none.
    api.sshKeys(me).then((r) => setKeys(r.keys || [])).catch(() => {});
  }, []);
  // A profile's next free time not computed yet, or computed before the
  // queue's last change, is being made (estimate_stale): no event says
  // when it is done, so read once more a moment later.
  const stale = (profiles || []).some((p) => p.estimate_stale);
  useEffect(() => {
    if (!stale) return undefined;
    const again = setTimeout(load, 3000);
    return () => clearTimeout(again);
  }, [stale, profiles]);
  return html`<${Header} session=${session} />
  <main id="main" tabindex="-1">
    <h1>${t('catalogue')}</h1>
    <p class="intro">${t('catalogueIntro')}</p>
    <${Problem} error=${error} />
    ${profiles && profiles.length === 0 && html`<p class="notice">${t('noProfiles')}</p>`}
    <ul class="cards" aria-busy=${profiles === null}>
      ${(profiles || []).map((p) => html`<${ProfileCard} key=${p.name} p=${p} hosts=${hosts} me=${me} keys=${keys} setKeys=${setKeys} />`)}
    </ul>
  </main>`;
}

function ProfileCard({p, hosts, me, keys, setKeys}) {
  const [asking, setAsking] = useState(false);
  const free = freeWords(p.gpu, hosts, p.free);
  const id = 'profile-' + p.name;
  const leaseDefault = hoursOf(p.lease.default), leaseMax = hoursOf(p.lease.max);
  let freeText = free.text, freeClass = 'free ' + (free.n === 0 ? 'none' : free.n > 0 ? 'some' : '');
  // What keeps it from being asked for: what it is made of is missing here
  // (its image not built), or no GPU here can ever give it.
  const whyNot = p.unavailable ? t('unavailableWhy', {why: p.unavailable})
    : p.unservable ? t('unservableWhy', {why: p.unservable}) : '';
  if (p.unavailable || p.unservable) {
    freeText = t(p.unavailable ? 'unavailable' : 'unservable');
    freeClass = 'free none';
  } else if (free.n === 0 && p.next_free_at) {
    freeText = t('nextFree', {time: aboutTime(p.next_free_at)});
  }
  const mark = p.unavailable ? ' unavailable' : p.unservable ? ' unservable' : '';
  return html`<li class=${'card profile' + mark} aria-labelledby=${id}>
    <h2 id=${id}>${gpuWords(p.gpu)}</h2>
    <p class="pname">${p.name}${p.description ? ' — ' + p.description : ''}</p>
    <dl class="facts">
      <div><dt>${t('vcpus')}</dt><dd>${p.vcpus}</dd></div>
      <div><dt>${t('memory')}</dt><dd>${fmtBytes(p.memory)}</dd></div>
      ${p.disk && p.disk.size ? html`<div><dt>${t('disk')}</dt><dd>${fmtBytes(p.disk.size)}</dd></div>` : null}
      <div><dt>${t('lease')}</dt><dd>${leaseMax ? t('leaseHours', {d: leaseDefault, m: leaseMax}) : t('leaseDefault', {d: leaseDefault})}</dd></div>
      <div><dt>${t('available')}</dt><dd class=${freeClass}>${freeText}</dd></div>
    </dl>
    ${whyNot
      ? html`<p class="why-not">${whyNot}</p>`
      : asking
        ? html`<${AskForm} p=${p} me=${me} keys=${keys} setKeys=${setKeys} onCancel=${() => setAsking(false)} />`
        : html`<div class="card-actions"><button type="button" onClick=${() => setAsking(true)} aria-describedby=${id}>${t('ask')}</button>
          ${api.canRunTask(p) && html`<a class="run-task" href=${'/tasks?profile=' + encodeURIComponent(p.name)}
            aria-describedby=${id}>${t('runTask')}</a>`}</div>`}
  </li>`;
}

// AskForm's inputs are left to the browser (no value props, which Preact
// would put back at every render): their first values are set once.
function AskForm({p, me, keys, setKeys, onCancel}) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const max = hoursOf(p.lease.max) || hoursOf(p.lease.default) || 1;
  const [hours, setHours] = useState(Math.min(hoursOf(p.lease.default) || 1, max));
  const [later, setLater] = useState(false);
  const [remember, setRemember] = useState(true);
  const first = useRef(null), hoursIn = useRef(null), sshIn = useRef(null), startIn = useRef(null);
  useEffect(() => {
    hoursIn.current.value = String(hours);
    if (first.current) first.current.focus();
  }, []);
  // The kept keys, once they are known, unless something was typed.
  useEffect(() => { if (sshIn.current && !sshIn.current.value) sshIn.current.value = keys.join('\n'); }, [keys]);
  useEffect(() => {
    if (later && startIn.current && !startIn.current.value) {
      const soon = new Date(Date.now() + 60 * 60 * 1000);
      soon.setMinutes(0, 0, 0);
      startIn.current.value = localInput(soon);
    }
  }, [later]);
  const fid = (f) => `ask-${p.name}-${f}`;
  const submit = async (e) => {
    e.preventDefault();
    const f = e.target.elements;
    const body = {profile: p.name, hours: Number(f.hours.value)};
    if (f.name.value.trim()) body.name = f.name.value.trim();
    const ks = f.ssh.value.split('\n').map((k) => k.trim()).filter(Boolean);
    if (ks.length) body.ssh_keys = ks;
    const checked = (n) => [...e.target.querySelectorAll(`input[name="${n}"]:checked`)].map((x) => x.value);
    const sh = checked('share'), vs = checked('volume');
    if (sh.length) body.shares = sh;
    if (vs.length) body.volumes = vs;
    if (later) {
      const at = new Date(f.startAt.value); // datetime-local: the viewer's time
      if (isNaN(at) || at <= new Date()) {
        f.startAt.setCustomValidity(t('startAtPast'));
        f.startAt.reportValidity();
        return;
      }
      body.start_at = at.toISOString();
    }
    setBusy(true); setError(null);
    try {
      if (remember && ks.join('\n') !== keys.join('\n')) {
        const r = await api.setSSHKeys(me, ks);
        setKeys(r.keys || ks);
      }
      const r = await api.call('POST', '/v1/vms', body);
      location.assign('/vms#vm-' + encodeURIComponent(r.vm.name));
    } catch (err) { setError(Object.assign(err, {sent: body})); setBusy(false); }
  };
  return html`<form class="ask" onSubmit=${submit} aria-label=${t('askTitle', {p: p.name})}>
    <label for=${fid('name')}>${t('name')}</label>
    <input id=${fid('name')} name="name" ref=${first} pattern="[a-z][a-z0-9\\-]{0,62}" autocomplete="off"
      aria-describedby=${fid('name-hint')} />
    <p class="hint" id=${fid('name-hint')}>${t('nameHint')}</p>
    <label for=${fid('hours')}>${t('hours')}</label>
    <input id=${fid('hours')} name="hours" type="number" min="1" max=${max} required ref=${hoursIn}
      aria-describedby=${fid('hours-hint')} onInput=${(e) => { const n = Number(e.target.value); if (Number.isInteger(n) && n >= 1 && n <= max) setHours(n); }} />
    <p class="hint" id=${fid('hours-hint')}>${t('hoursHint', {m: max})}</p>
    <fieldset class="when">
      <legend>${t('when')}</legend>
      <label class="choice"><input type="radio" name="when" id=${fid('now')} value="now" checked=${!later} onChange=${() => setLater(false)} /> ${t('startNow')}</label>
      <label class="choice"><input type="radio" name="when" id=${fid('later')} value="later" checked=${later} onChange=${() => setLater(true)} /> ${t('startLater')}</label>
    </fieldset>
    ${later && html`<label for=${fid('start')}>${t('startAt')}</label>
      <input id=${fid('start')} name="startAt" type="datetime-local" required min=${localInput(new Date())} ref=${startIn}
        aria-describedby=${fid('start-hint')} onInput=${(e) => e.target.setCustomValidity('')} />
      <p class="hint" id=${fid('start-hint')}>${t('startAtHint')}</p>`}
    <label for=${fid('ssh')}>${t('sshKeys')}</label>
    <textarea id=${fid('ssh')} name="ssh" rows="3" spellcheck="false" ref=${sshIn} aria-describedby=${fid('ssh-hint')}></textarea>
    <p class="hint" id=${fid('ssh-hint')}>${t('sshHint')}${keys.length ? ' ' + t('keysSaved') : ''}</p>
    <label class="choice"><input type="checkbox" name="remember" id=${fid('remember')} checked=${remember}
      onChange=${(e) => setRemember(e.target.checked)} /> ${t('rememberKeys')}</label>
    <${Extras} p=${p} fid=${fid} error=${error} />
    <${PolicyAnswer} p=${p} hours=${hours} id=${fid('policy')} />
    <${Problem} error=${extraField(error) ? null : error} />
    <div class="buttons">
      <button type="submit" disabled=${busy}>${busy ? t('asking') : t('submit')}</button>
      <button type="button" class="quiet" onClick=${onCancel}>${t('cancel')}</button>
    </div>
  </form>`;
}

// extraField is the group a refusal of POST /v1/vms names: 'shares'
// (shares or shares[i]), 'volumes' (volumes or volumes[i]), or ''.
function extraField(err) {
  const f = (err && err.problem && err.problem.field) || '';
  const m = /^(shares|volumes)(\[(\d+)\])?$/.exec(f);
  return m ? m[1] : '';
}

// refusedName is the share or disk a refusal names by its index in what
// was sent (shares[1]), or '' when it names the whole group.
function refusedName(err) {
  const m = /^(shares|volumes)\[(\d+)\]$/.exec((err && err.problem && err.problem.field) || '');
  return m && err.sent && err.sent[m[1]] ? err.sent[m[1]][Number(m[2])] || '' : '';
}

// Extras offers what the ask may add to the profile, as checkboxes: the
// shares the caller may mount (GET /v1/shares) that the profile does not
// mount always, and their data disks that are ready and attached to no VM
// (GET /v1/volumes). A group with nothing to offer is not shown; a
// server without shares or data disks shows neither. The server's refusal
// of either is shown beside its group, the checkbox it names marked.
function Extras({p, fid, error}) {
  const [shares, setShares] = useState([]);
  const [disks, setDisks] = useState([]);
  useEffect(() => {
    let gone = false;
    api.shares().then((r) => {
      if (!gone) setShares((r.shares || []).filter((s) => (s.mode === 'ro' || s.mode === 'rw') && !(p.shares || []).includes(s.name)));
    }).catch(() => {});
    api.volumes().then((r) => {
      if (!gone) setDisks((r.volumes || []).filter((v) => v.kind === 'disk' && v.state === 'ready' && !v.attached_vm));
    }).catch(() => {});
    return () => { gone = true; };
  }, [p.name]);
  const refused = extraField(error), name = refusedName(error);
  const always = (p.shares || []).length ? t('sharesAlways', {names: p.shares.join(', ')}) : '';
  return html`
    ${shares.length > 0 && html`<${Group} id=${fid('shares')} legend=${t('shares')} hint=${t('sharesHint') + (always ? ' ' + always : '')}
      error=${refused === 'shares' ? error : null} items=${shares.map((s) => ({
        name: 'share', value: s.name, id: fid('share-' + s.name), bad: refused === 'shares' && name === s.name, disabled: !s.available,
        text: s.name, detail: t('shareAt', {mode: t(s.mode === 'ro' ? 'shareRO' : 'shareRW'), mount: s.mount}) + (s.available ? '' : ' — ' + t('shareUnavailable')),
      }))} />`}
    ${disks.length > 0 && html`<${Group} id=${fid('volumes')} legend=${t('disks')} hint=${t('disksHint')}
      error=${refused === 'volumes' ? error : null} items=${disks.map((v) => ({
        name: 'volume', value: v.name, id: fid('volume-' + v.name), bad: refused === 'volumes' && name === v.name,
        text: v.name, detail: fmtBytes(v.size_bytes),
      }))} />`}`;
}

// Group is one group of checkboxes with its hint and the server's
// refusal beside it.
function Group({id, legend, hint, error, items}) {
  const errID = id + '-error';
  return html`<fieldset class="extras" id=${id} aria-describedby=${id + '-hint'}>
    <legend>${legend}</legend>
    <p class="hint" id=${id + '-hint'}>${hint}</p>
    ${items.map((it) => html`<label class="choice">
      <input type="checkbox" name=${it.name} value=${it.value} id=${it.id} disabled=${it.disabled}
        aria-invalid=${it.bad ? 'true' : undefined} aria-describedby=${it.bad ? errID : undefined} />
      <span><span class="extra-name">${it.text}</span> <span class="extra-detail">${it.detail}</span></span></label>`)}
    ${error && html`<p class="field-error" id=${errID} role="alert">${error.message}</p>`}
  </fieldset>`;
}

// PolicyAnswer shows what the sharing policy says to this ask before it is
// made (GET /v1/profiles/{name}/admission), with the quota and what is
// left of each GPU-hour budget (GET /v1/usage from the budget's start).
function PolicyAnswer({p, hours, id}) {
  const [adm, setAdm] = useState(null);
  const [used, setUsed] = useState({});
  const [error, setError] = useState(null);
  useEffect(() => {
    let gone = false;
    const timer = setTimeout(async () => {
      try {
        const a = await api.admission(p.name, hours);
        if (gone) return;
        setAdm(a); setError(null);
        const u = {};
        await Promise.all((a.budgets || []).map(async (b) => {
          const r = await api.call('GET', '/v1/usage?from=' + encodeURIComponent(b.start));
          u[b.unit] = r.total ? r.total.gpu_hours : 0;
        }));
        if (!gone) setUsed(u);
      } catch (err) { if (!gone) setError(err); }
    }, 150);
    return () => { gone = true; clearTimeout(timer); };
  }, [p.name, hours]);
  let answer = null;
  if (adm) {
    switch (adm.answer) {
      case 'starts': answer = html`<p class="answer ok">${t('policyStarts')}</p>`; break;
      case 'waits': answer = html`<p class="answer wait">${t('policyWaits', {reason: adm.reason})}</p>`; break;
      case 'refused': answer = html`<p class="answer no">${t('policyRefused', {reason: adm.reason})}</p>`; break;
    }
  }
  const q = (adm && adm.quota) || {};
  const limits = [];
  if (q.vms != null) limits.push(t('quotaVMs', {n: q.vms}));
  if (q.gpus != null) limits.push(t('quotaGPUs', {n: q.gpus}));
  if (q.slices != null) limits.push(t('quotaSlices', {n: q.slices}));
  if (q.gpu_memory != null) limits.push(t('quotaMemory', {mem: fmtBytes(q.gpu_memory)}));
  for (const b of (adm && adm.budgets) || []) {
    const u = used[b.unit];
    limits.push(u === undefined
      ? t('budgetNoUsage', {limit: hoursText(b.gpu_hours), unit: t('unit_' + b.unit)})
      : t('budget_' + b.unit, {used: hoursText(u), limit: hoursText(b.gpu_hours), left: hoursText(Math.max(0, b.gpu_hours - u))}));
  }
  const w = adm && adm.window;
  return html`<section class="policy" id=${id} aria-labelledby=${id + '-h'} aria-live="polite" aria-busy=${!adm && !error}>
    <h3 id=${id + '-h'}>${t('policy')}</h3>
    ${!adm && !error && html`<p class="hint">${t('policyLoading')}</p>`}
    ${error && html`<p class="hint">${t('error', {msg: error.message})}</p>`}
    ${answer}
    ${adm && html`<p class="quota-title">${t('yourQuota')}</p>
      ${limits.length ? html`<ul class="quota">${limits.map((l) => html`<li>${l}</li>`)}</ul>` : html`<p class="quota none">${t('noQuota')}</p>`}
      <p class="window">${w ? sentences(t('windowNow', {name: w.name, end: fmtTime(w.end)}), t(w.allows ? 'windowAllows' : 'windowForbids')) : t('noWindow')}</p>`}
  </section>`;
}
