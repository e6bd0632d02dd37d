// pages/admin.js: /admin, what an admin looks after, one headed section
// each (linked from the page's own contents): users and their tokens, the
// queue of everybody, alerts, the audit log, the configuration's reload
// with its diagnostics at file:line, and the periodic review report.
import {html, useState, useEffect, useCallback, useRef} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t, addWords, fmtTime, fmtRelative, stateWord} from '../i18n.js';
import {Header, Problem, Confirm, useEvents} from '../ui.js';

addWords({
  en: {
    adminTitle: 'Admin', adminIntro: 'Users and tokens, the queue, alerts, the audit log, the configuration and the review report.',
    adminsOnly: 'For admins only.', contents: 'On this page',
    secUsers: 'Users', secQueue: 'The queue', secAlerts: 'Alerts', secAudit: 'Audit log', secConfig: 'Configuration', secReport: 'Review report',
    userName: 'Name', admin: 'Admin', groups: 'Groups', source: 'Source', created: 'Created', status: 'Status',
    disabled: 'disabled', active: 'active', yes: 'yes', no: 'no',
    newUser: 'Add a user', groupsHint: 'Comma-separated (optional).', makeAdmin: 'An admin', addUser: 'Add', userAdded: 'User {name} added.',
    tokensOf: 'Tokens of {name}', showTokens: 'Tokens', hideTokens: 'Hide tokens', noTokens: 'No token.',
    tokenName: 'Token name', expiresIn: 'Expires in hours', expiresHint: 'Empty: it does not expire.', makeToken: 'Make a token',
    tokenShown: 'The token of {name}, shown once: copy it now.', copy: 'Copy', copied: 'Copied.', copyFailed: 'Copy it by hand: the browser did not let this page.',
    prefix: 'Starts with', lastUsed: 'Last used', expires: 'Expires', never: 'never', revoke: 'Revoke',
    confirmRevoke: 'Revoke token {token} of {name}? Whatever uses it is refused from now on.', revokeYes: 'Yes, revoke', revoked: 'Token {token} revoked.',
    tokenStates: {active: 'active', revoked: 'revoked', expired: 'expired'},
    queueIntro: 'Everybody\'s queued VMs, in the order they are placed, with the reason each waits.',
    pos: 'Position', vm: 'VM', owner: 'Owner', reason: 'Reason', waiting: 'Asked', startAt: 'not before', noQueue: 'Nobody waits.',
    alertRule: 'Rule', subject: 'Subject', host: 'Host', value: 'Value', alertState: 'State', since: 'Since', noAlerts: 'No alert.',
    alertStates: {firing: 'firing', resolved: 'resolved'},
    time: 'Time', user: 'User', action: 'Action', target: 'Target', outcome: 'Outcome', detail: 'Detail',
    filterUser: 'User', filterAction: 'Action', filterHint: 'An action (vm.create) or a kind (vm.).', filter: 'Filter', older: 'Older entries', noAudit: 'No entry.',
    outcomes: {ok: 'ok', refused: 'refused', failed: 'failed'},
    sources: {local: 'local', ldap: 'LDAP', oidc: 'OIDC'},
    configIntro: 'Read the configuration files again. All or nothing: if they have errors the one in force stays.',
    reload: 'Reload the configuration', reloading: 'Reloading…', reloaded: 'Reloaded: {config}.',
    refused: 'The reload was refused: {detail}', diagnostics: 'Diagnostics', severities: {error: 'error', warning: 'warning'},
    reportIntro: 'Usage of the last 7 days, as the periodic review report shows it.', openReport: 'Open the full report',
    gpuHours: 'GPU-hours held', capacity: 'of the capacity of {n} GPUs', capacityOne: 'of the capacity of 1 GPU', idleVMOne: 'idle VM', idleHours: 'GPU-hours held idle', idleVMs: 'idle VMs',
    simHours: 'GPU-hours on simulated GPU servers (utilisation not measured)',
    utilisation: 'utilisation where measured', notes: 'What stands out', noNotes: 'Nothing stands out.',
  },
  'zh-CN': {
    adminTitle: '管理', adminIntro: '用户与令牌、队列、告警、审计日志、配置与使用报告。',
    adminsOnly: '仅限管理员。', contents: '本页内容',
    secUsers: '用户', secQueue: '队列', secAlerts: '告警', secAudit: '审计日志', secConfig: '配置', secReport: '使用报告',
    userName: '名称', admin: '管理员', groups: '用户组', source: '来源', created: '创建于', status: '状态',
    disabled: '已停用', active: '有效', yes: '是', no: '否',
    newUser: '添加用户', groupsHint: '用逗号分隔（可选）。', makeAdmin: '管理员', addUser: '添加', userAdded: '已添加用户 {name}。',
    tokensOf: '{name} 的令牌', showTokens: '令牌', hideTokens: '收起令牌', noTokens: '没有令牌。',
    tokenName: '令牌名称', expiresIn: '有效小时数', expiresHint: '留空：永不过期。', makeToken: '生成令牌',
    tokenShown: '{name} 的令牌只显示这一次：请立即复制。', copy: '复制', copied: '已复制。', copyFailed: '浏览器不允许本页复制，请手动复制。',
    prefix: '开头', lastUsed: '最近使用', expires: '过期', never: '从不', revoke: '吊销',
    confirmRevoke: '吊销 {name} 的令牌 {token}？此后使用它的请求都会被拒绝。', revokeYes: '确定吊销', revoked: '令牌 {token} 已吊销。',
    tokenStates: {active: '有效', revoked: '已吊销', expired: '已过期'},
    queueIntro: '所有人排队中的虚拟机，按放置顺序排列，并写明各自等待的原因。',
    pos: '位置', vm: '虚拟机', owner: '所有者', reason: '原因', waiting: '申请于', startAt: '最早开始于', noQueue: '没有人在排队。',
    alertRule: '规则', subject: '对象', host: '主机', value: '数值', alertState: '状态', since: '开始于', noAlerts: '没有告警。',
    alertStates: {firing: '触发中', resolved: '已恢复'},
    time: '时间', user: '用户', action: '操作', target: '对象', outcome: '结果', detail: '详情',
    filterUser: '用户', filterAction: '操作', filterHint: '一个操作（vm.create）或一类（vm.）。', filter: '筛选', older: '更早的记录', noAudit: '没有记录。',
    outcomes: {ok: '成功', refused: '被拒绝', failed: '失败'},
    sources: {local: '本地', ldap: 'LDAP', oidc: 'OIDC'},
    configIntro: '重新读取配置文件。全有或全无：若有错误，当前配置保持不变。',
    reload: '重新加载配置', reloading: '正在重新加载…', reloaded: '已重新加载：{config}。',
    refused: '重新加载被拒绝：{detail}', diagnostics: '诊断信息', severities: {error: '错误', warning: '警告'},
    reportIntro: '最近 7 天的用量，与定期使用报告一致。', openReport: '打开完整报告',
    gpuHours: '占用的 GPU 小时', capacity: '占 {n} 块 GPU 容量的比例', capacityOne: '占 1 块 GPU 容量的比例', idleVMOne: '闲置虚拟机', idleHours: '闲置的 GPU 小时', idleVMs: '闲置虚拟机',
    simHours: '模拟 GPU 服务器上的 GPU 小时（未测量利用率）',
    utilisation: '已测得的利用率', notes: '值得注意', noNotes: '没有值得注意的情况。',
  },
});

const word = (table, k) => (t(table) || {})[k] || k;

export default function Admin({session}) {
  const admin = session && session.user.admin;
  if (!admin) {
    return html`<${Header} session=${session} />
    <main id="main" tabindex="-1"><h1>${t('adminTitle')}</h1><p class="notice error" id="admins-only">${t('adminsOnly')}</p></main>`;
  }
  const sections = [['users', 'secUsers'], ['queue', 'secQueue'], ['alerts', 'secAlerts'], ['audit', 'secAudit'], ['config', 'secConfig'], ['report', 'secReport']];
  return html`<${Header} session=${session} />
  <main id="main" tabindex="-1" class="admin">
    <h1>${t('adminTitle')}</h1>
    <p class="intro">${t('adminIntro')}</p>
    <nav class="contents" aria-label=${t('contents')}>
      ${sections.map(([id, k]) => html`<a href=${'#' + id}>${t(k)}</a>`)}
    </nav>
    <${Users} />
    <${Queue} />
    <${Alerts} />
    <${Audit} />
    <${Reload} />
    <${Report} />
  </main>`;
}

// Section is one headed part of the page, its anchor its id.
function Section({id, title, children}) {
  return html`<section class="card admin-sec" id=${id} aria-labelledby=${id + '-h'}>
    <h2 id=${id + '-h'}>${title}</h2>
    ${children}
  </section>`;
}

const when = (iso) => (iso ? html`<time datetime=${iso}>${fmtTime(iso)}</time>` : t('never'));

function Users() {
  const [users, setUsers] = useState(null);
  const [error, setError] = useState(null);
  const [said, setSaid] = useState('');
  const [open, setOpen] = useState('');
  const load = useCallback(() => api.users().then((l) => { setUsers(l.items || []); setError(null); }, setError), []);
  useEffect(() => { load(); }, [load]);
  const add = async (e) => {
    e.preventDefault();
    const f = e.target;
    const groups = f.groups.value.split(',').map((g) => g.trim()).filter(Boolean);
    try {
      const u = await api.createUser({name: f.uname.value.trim(), admin: f.uadmin.checked, groups});
      setSaid(t('userAdded', {name: u.name}));
      f.reset();
      load();
    } catch (err) { setError(err); }
  };
  return html`<${Section} id="users" title=${t('secUsers')}>
    <${Problem} error=${error} />
    <p class="sr-only" role="status" aria-live="polite">${said}</p>
    <div class="scroll"><table class="list" id="user-table">
      <thead><tr><th scope="col">${t('userName')}</th><th scope="col">${t('admin')}</th><th scope="col">${t('groups')}</th>
        <th scope="col">${t('source')}</th><th scope="col">${t('status')}</th><th scope="col"><span class="sr-only">${t('showTokens')}</span></th></tr></thead>
      <tbody>
        ${(users || []).map((u) => html`<tr key=${u.name} data-user=${u.name}>
          <th scope="row">${u.name}</th><td data-label=${t('admin')}>${u.admin ? t('yes') : t('no')}</td>
          <td data-label=${t('groups')}>${(u.groups || []).join(', ')}</td>
          <td data-label=${t('source')}>${u.source ? word('sources', u.source) : ''}</td><td>${u.disabled_at ? t('disabled') : t('active')}</td>
          <td class="act"><button type="button" class="quiet small" aria-expanded=${open === u.name} aria-controls="tokens-panel"
            onClick=${() => setOpen(open === u.name ? '' : u.name)}>${open === u.name ? t('hideTokens') : t('showTokens')}</button></td>
        </tr>`)}
      </tbody>
    </table></div>
    ${open && html`<${Tokens} key=${open} name=${open} />`}
    <form class="inline-form" id="new-user" onSubmit=${add}>
      <h3>${t('newUser')}</h3>
      <div class="row">
        <label>${t('userName')}<input name="uname" required autocomplete="off" /></label>
        <div class="field"><label>${t('groups')}<input name="groups" autocomplete="off" aria-describedby="groups-hint" /></label>
          <p class="hint" id="groups-hint">${t('groupsHint')}</p></div>
        <label class="check"><input type="checkbox" name="uadmin" /> ${t('makeAdmin')}</label>
        <button type="submit">${t('addUser')}</button>
      </div>
    </form>
  <//>`;
}

function Tokens({name}) {
  const [list, setList] = useState(null);
  const [error, setError] = useState(null);
  const [made, setMade] = useState(null);
  const [confirm, setConfirm] = useState(null);
  const [said, setSaid] = useState('');
  const secret = useRef(null);
  const load = useCallback(() => api.tokens(name).then((l) => setList(l.items || []), setError), [name]);
  useEffect(() => { load(); }, [load]);
  const make = async (e) => {
    e.preventDefault();
    const f = e.target;
    const body = {name: f.tname.value.trim()};
    if (f.hours.value) body.expires_in_hours = Number(f.hours.value);
    try { setMade(await api.createToken(name, body)); setError(null); f.reset(); load(); } catch (err) { setError(err); }
  };
  const copy = async () => {
    try { await navigator.clipboard.writeText(made.token); setSaid(t('copied')); } catch { secret.current.select(); setSaid(t('copyFailed')); }
  };
  const revoke = async (tok) => {
    setConfirm(null);
    try { await api.revokeToken(name, tok.id); setSaid(t('revoked', {token: tok.name})); load(); } catch (err) { setError(err); }
  };
  return html`<div class="tokens" id="tokens-panel" data-user=${name}>
    <h3>${t('tokensOf', {name})}</h3>
    <${Problem} error=${error} />
    <p class="sr-only" role="status" aria-live="polite">${said}</p>
    ${made && html`<div class="notice secret" id="new-token">
      <label for="token-secret">${t('tokenShown', {name})}</label>
      <div class="row"><input id="token-secret" ref=${secret} readonly value=${made.token} onFocus=${(e) => e.target.select()} />
        <button type="button" id="copy-token" onClick=${copy}>${t('copy')}</button></div>
    </div>`}
    ${list && list.length === 0 && html`<p class="hint">${t('noTokens')}</p>`}
    ${list && list.length > 0 && html`<div class="scroll"><table class="list">
      <thead><tr><th scope="col">${t('tokenName')}</th><th scope="col">${t('prefix')}</th><th scope="col">${t('status')}</th>
        <th scope="col">${t('created')}</th><th scope="col">${t('lastUsed')}</th><th scope="col">${t('expires')}</th><th scope="col"><span class="sr-only">${t('revoke')}</span></th></tr></thead>
      <tbody>${list.map((k) => html`<tr key=${k.id} data-token=${k.id}>
        <th scope="row">${k.name}</th><td><code>${k.prefix}</code></td><td>${word('tokenStates', k.state)}</td>
        <td>${when(k.created_at)}</td><td>${when(k.last_used_at)}</td><td>${when(k.expires_at)}</td>
        <td>${k.state === 'active' && html`<button type="button" class="danger small" aria-label=${t('revoke') + ' ' + k.name}
          onClick=${() => setConfirm(k)}>${t('revoke')}</button>`}</td>
      </tr>`)}</tbody>
    </table></div>`}
    <form class="inline-form" id="new-token-form" onSubmit=${make}>
      <div class="row">
        <label>${t('tokenName')}<input name="tname" required maxlength="64" autocomplete="off" /></label>
        <div class="field"><label>${t('expiresIn')}<input name="hours" type="number" min="1" max="87600" aria-describedby="hours-hint" /></label>
          <p class="hint" id="hours-hint">${t('expiresHint')}</p></div>
        <button type="submit">${t('makeToken')}</button>
      </div>
    </form>
    ${confirm && html`<${Confirm} text=${t('confirmRevoke', {token: confirm.name, name})} yes=${t('revokeYes')} danger=${true}
      onYes=${() => revoke(confirm)} onNo=${() => setConfirm(null)} />`}
  </div>`;
}

function Queue() {
  const [vms, setVMs] = useState(null);
  const [error, setError] = useState(null);
  const load = useCallback(() => api.queuedVMs().then((l) => {
    const items = (l.items || []).slice().sort((a, b) => (a.queue_position || 1e9) - (b.queue_position || 1e9) || a.created_at.localeCompare(b.created_at));
    setVMs(items); setError(null);
  }, setError), []);
  useEffect(() => { load(); }, [load]);
  useEvents(['vm.created', 'vm.state'], load, null, setError);
  return html`<${Section} id="queue" title=${t('secQueue')}>
    <p class="hint">${t('queueIntro')}</p>
    <${Problem} error=${error} />
    ${vms && vms.length === 0 && html`<p class="notice">${t('noQueue')}</p>`}
    ${vms && vms.length > 0 && html`<div class="scroll"><table class="list" id="queue-table">
      <thead><tr><th scope="col">${t('pos')}</th><th scope="col">${t('vm')}</th><th scope="col">${t('owner')}</th><th scope="col">${t('profile')}</th>
        <th scope="col">${t('reason')}</th><th scope="col">${t('waiting')}</th></tr></thead>
      <tbody>${vms.map((vm) => html`<tr key=${vm.id} data-vm=${vm.owner + '/' + vm.name}>
        <td>${vm.queue_position || '—'}</td><th scope="row">${vm.name}</th><td>${vm.owner}</td><td>${vm.profile}</td>
        <td class="reason">${vm.reason || stateWord(vm.state)}${vm.start_at ? ' (' + t('startAt') + ' ' + fmtTime(vm.start_at) + ')' : ''}</td>
        <td><time datetime=${vm.created_at}>${fmtRelative(vm.created_at)}</time></td>
      </tr>`)}</tbody>
    </table></div>`}
  <//>`;
}

function Alerts() {
  const [items, setItems] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => { api.alerts().then((l) => setItems(l.items || []), setError); }, []);
  return html`<${Section} id="alerts" title=${t('secAlerts')}>
    <${Problem} error=${error} />
    ${items && items.length === 0 && html`<p class="notice">${t('noAlerts')}</p>`}
    ${items && items.length > 0 && html`<div class="scroll"><table class="list" id="alert-table">
      <thead><tr><th scope="col">${t('alertRule')}</th><th scope="col">${t('subject')}</th><th scope="col">${t('host')}</th>
        <th scope="col">${t('value')}</th><th scope="col">${t('alertState')}</th><th scope="col">${t('since')}</th></tr></thead>
      <tbody>${items.map((a) => html`<tr key=${a.id} class=${'a-' + a.state}>
        <th scope="row">${a.rule}</th><td>${a.subject}${a.summary ? html`<br /><span class="hint">${a.summary}</span>` : ''}</td><td>${a.host || ''}</td>
        <td>${a.metric} ${Number(a.value).toPrecision(3)}</td><td>${word('alertStates', a.state)}</td><td>${when(a.started_at)}</td>
      </tr>`)}</tbody>
    </table></div>`}
  <//>`;
}

function Audit() {
  const [query, setQuery] = useState({user: '', action: ''});
  const [pages, setPages] = useState([]); // the pages read, newest first
  const [error, setError] = useState(null);
  const read = useCallback(async (q, after) => {
    try {
      const p = await api.audit({...q, after});
      setPages((ps) => (after ? [...ps, p] : [p]));
      setError(null);
    } catch (err) { setError(err); }
  }, []);
  useEffect(() => { read(query, ''); }, [query]);
  const submit = (e) => {
    e.preventDefault();
    setQuery({user: e.target.auser.value.trim(), action: e.target.aaction.value.trim()});
  };
  const items = pages.flatMap((p) => p.items || []);
  const next = pages.length ? pages[pages.length - 1].next : '';
  return html`<${Section} id="audit" title=${t('secAudit')}>
    <form class="inline-form" id="audit-filter" onSubmit=${submit} role="search">
      <div class="row">
        <label>${t('filterUser')}<input name="auser" autocomplete="off" /></label>
        <div class="field"><label>${t('filterAction')}<input name="aaction" autocomplete="off" aria-describedby="action-hint" /></label>
          <p class="hint" id="action-hint">${t('filterHint')}</p></div>
        <button type="submit">${t('filter')}</button>
      </div>
    </form>
    <${Problem} error=${error} />
    ${pages.length > 0 && items.length === 0 && html`<p class="notice">${t('noAudit')}</p>`}
    ${items.length > 0 && html`<div class="scroll"><table class="list" id="audit-table">
      <thead><tr><th scope="col">${t('time')}</th><th scope="col">${t('user')}</th><th scope="col">${t('action')}</th>
        <th scope="col">${t('target')}</th><th scope="col">${t('outcome')}</th><th scope="col">${t('detail')}</th></tr></thead>
      <tbody>${items.map((a) => html`<tr key=${a.id} data-action=${a.action} class=${'o-' + a.outcome}>
        <td>${when(a.time)}</td><td>${a.user || '—'}</td><th scope="row">${a.action}</th><td>${a.target || ''}</td>
        <td>${word('outcomes', a.outcome)}${a.status ? ' (' + a.status + ')' : ''}</td><td class="detail">${a.detail || ''}</td>
      </tr>`)}</tbody>
    </table></div>`}
    ${next && html`<div class="buttons"><button type="button" class="quiet" id="audit-older" onClick=${() => read(query, next)}>${t('older')}</button></div>`}
  <//>`;
}

function Reload() {
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState(null); // {ok, text, diags}
  const [error, setError] = useState(null);
  const go = async () => {
    setBusy(true); setError(null); setResult(null);
    try {
      const r = await api.reload();
      setResult({ok: true, text: t('reloaded', {config: r.config}), diags: r.config_diagnostics || []});
    } catch (err) {
      if (err.status === 422 && err.problem) {
        setResult({ok: false, text: t('refused', {detail: err.problem.detail || ''}), diags: err.problem.config_diagnostics || [], raw: err.problem.diagnostics});
      } else setError(err);
    } finally { setBusy(false); }
  };
  return html`<${Section} id="config" title=${t('secConfig')}>
    <p class="hint">${t('configIntro')}</p>
    <div class="buttons"><button type="button" id="reload" disabled=${busy} onClick=${go}>${busy ? t('reloading') : t('reload')}</button></div>
    <${Problem} error=${error} />
    ${result && html`<div class=${'notice ' + (result.ok ? 'ok' : 'error')} role=${result.ok ? 'status' : 'alert'} id="reload-result">
      <p>${result.text}</p>
      ${result.diags.length > 0 && html`<h3>${t('diagnostics')}</h3><ul class="diags">
        ${result.diags.map((d) => html`<li class=${'d-' + d.severity}>
          ${d.file && html`<code class="at">${d.file}${d.line ? ':' + d.line + (d.column ? ':' + d.column : '') : ''}</code>`}
          <b>${word('severities', d.severity)}:</b> ${d.summary}${d.detail ? ' — ' + d.detail : ''}</li>`)}
      </ul>`}
      ${result.diags.length === 0 && result.raw && html`<pre class="diags">${result.raw}</pre>`}
    </div>`}
  <//>`;
}

function Report() {
  const [r, setR] = useState(null);
  const [error, setError] = useState(null);
  const [range] = useState(() => {
    const to = new Date();
    return {from: new Date(to.getTime() - 7 * 24 * 3600 * 1000).toISOString(), to: to.toISOString()};
  });
  useEffect(() => { api.reportSummary(range.from, range.to).then(setR, setError); }, []);
  // GPU-hours as the report writes them (api.FormatGPUHours): two
  // significant digits under 1, one decimal under 100, whole above.
  const hours = (h) => (!h ? '0' : h < 0.001 ? '<0.001' : h < 1 ? h.toFixed(1 - Math.floor(Math.log10(h)))
    : h < 100 ? h.toFixed(1) : Math.round(h).toLocaleString('en'));
  const pct = (f) => (f == null ? '—' : Math.round(100 * f) + '%');
  const href = '/v1/reports/summary.html?' + new URLSearchParams({...range, tz: Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC'});
  return html`<${Section} id="report" title=${t('secReport')}>
    <p class="hint">${t('reportIntro')}</p>
    <${Problem} error=${error} />
    ${r && html`<ul class="report-cards">
      <li><b>${hours(r.total.gpu_hours)}</b><span>${t('gpuHours')}</span></li>
      <li><b>${pct(r.capacity_gpu_hours ? r.total.gpu_hours / r.capacity_gpu_hours : null)}</b><span>${t(r.gpus === 1 ? 'capacityOne' : 'capacity', {n: r.gpus})}</span></li>
      <li><b>${pct(r.total.utilization)}</b><span>${t('utilisation')}</span></li>
      <li><b>${hours(r.total.idle_gpu_hours)}</b><span>${t('idleHours')}</span></li>
      ${r.total.simulated_gpu_hours > 0 && html`<li id="report-simulated"><b>${hours(r.total.simulated_gpu_hours)}</b><span>${t('simHours')}</span></li>`}
      <li><b>${(r.idle_vms || []).length}</b><span>${t((r.idle_vms || []).length === 1 ? 'idleVMOne' : 'idleVMs')}</span></li>
    </ul>
    <h3>${t('notes')}</h3>
    ${(r.notes || []).length ? html`<ul class="notes">${r.notes.map((n) => html`<li>${n}</li>`)}</ul>` : html`<p class="hint">${t('noNotes')}</p>`}`}
    <p><a href=${href} target="_blank" rel="noopener" id="open-report">${t('openReport')}</a></p>
  <//>`;
}
