// pages/tasks.js: /tasks, "Tasks": submit a task (a command or a script
// run in a GPU VM of its own, deleted when it ends: POST /v1/tasks), the
// caller's tasks newest first (GET /v1/tasks, a page at a time) with their
// state, the reason of a pending one, the end as Slurm writes it
// ("code:signal") and the times; and one task's details with its output,
// followed while it runs (GET /v1/tasks/{id}/logs?follow=1), and its
// cancel (confirmed). /tasks?profile=NAME opens the form with that profile
// chosen (the catalogue's "Run a task"); /tasks?task=ID opens that task.
// Every refusal is shown in the server's words beside the field its
// problem names.
import {html, useState, useEffect, useCallback, useRef} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t, addWords, sentences, fmtTime, fmtRelative, fmtBytes, gpuWords, hoursOf} from '../i18n.js';
import {Header, Problem, Confirm, useEvents} from '../ui.js';

addWords({
  en: {
    tk_title: 'Tasks',
    tk_intro: 'A task runs a command or a script in a GPU VM of its own, made for it and deleted the moment the command ends, so the GPU is given back then. It waits in the queue as a VM does.',
    tk_submit: 'Submit a task', tk_profile: 'Profile', tk_profileHint: 'The machines you may use that have a GPU and can run a task.',
    tk_noProfiles: 'There is no machine with a GPU that you may run a task in. Ask your admin{admin}.',
    tk_profileRefused: 'You cannot run a task in “{name}”: it is not among the machines you may use that have a GPU and can run a task.',
    tk_profileInstead: '{first} is chosen instead.',
    tk_what: 'What to run', tk_modeCommand: 'A command', tk_modeScript: 'A script',
    tk_command: 'Command', tk_commandHint: 'Split into words as a shell would (quotes keep words together), then run as it is: no shell runs it. For pipes or several commands, write a script.',
    tk_script: 'Script', tk_scriptHint: 'Run by its `#!` line, else by `sh`.',
    tk_unclosedQuote: 'A quote is not closed.',
    tk_time: 'Time limit', tk_timeHint: 'A duration such as `90m` or `4h`: at the limit the command gets `SIGTERM`, then it is stopped. At most {m} h for this profile.',
    tk_timeHintAny: 'A duration such as `90m` or `4h`: at the limit the command gets `SIGTERM`, then it is stopped.',
    tk_after: 'Start after (optional)', tk_afterHint: 'Your local time. The task waits in the queue until then.',
    tk_killWait: 'Kill wait (optional)', tk_killWaitHint: 'Time between `SIGTERM` and the stop, at the limit or a cancel: `0s` to `10m`, `30s` when empty.',
    tk_submitYes: 'Submit', tk_submitting: 'Submitting…', tk_submitted: 'Task {id} is submitted: {state}.',
    tk_list: 'Your tasks', tk_none: 'You have no tasks yet.', tk_more: 'Show older tasks',
    tk_state: 'State', tk_reason: 'Why', tk_estimated: 'Expected start', tk_exit: 'Exit code',
    tk_exitHint: 'exit status:signal, as Slurm writes it',
    tk_submittedAt: 'Submitted', tk_started: 'Started', tk_ended: 'Ended', tk_limit: 'Time limit', tk_killWaitFact: 'Kill wait',
    tk_id: 'Task', tk_output: 'Output', tk_kept: 'kept', tk_details: 'Details', tk_hide: 'Hide',
    tk_log: 'Output of task `{id}`', tk_following: 'Following the output as it comes…', tk_logEnded: 'The task has ended: this is all of its output.',
    tk_logNone: 'No output yet.', tk_logWaits: 'The command has not started yet: its output comes here when it does.',
    tk_logCut: '(the start of the output is not shown here: the page keeps its last {n})',
    tk_logError: 'The output could not be read: {msg}',
    tk_cancel: 'Cancel task', tk_confirmCancel: 'Cancel task {id}? A pending task\'s VM is deleted; a running command gets SIGTERM, then after the kill wait it is stopped.',
    tk_cancelYes: 'Yes, cancel it', tk_cancelAsked: 'Cancelling task {id}.', tk_cancelling: 'Cancelling…',
    tk_states: {pending: 'pending', booting: 'booting', running: 'running', completing: 'completing', completed: 'completed',
      failed: 'failed', timeout: 'timed out', cancelled: 'cancelled', boot_fail: 'boot failed', node_fail: 'node failed'},
    tk_sec: '{n} s', tk_min: '{n} min', tk_hour: '{n} h',
  },
  'zh-CN': {
    tk_title: '任务',
    tk_intro: '任务在一台专属的 GPU 虚拟机中运行一条命令或一个脚本；虚拟机为它创建，命令一结束就删除，GPU 随即归还。它和虚拟机一样在队列中等待。',
    tk_submit: '提交任务', tk_profile: '配置', tk_profileHint: '你可以使用的、带 GPU 且能运行任务的机器。',
    tk_noProfiles: '没有你可以运行任务的带 GPU 的机器。请联系管理员{admin}。',
    tk_profileRefused: '你不能在“{name}”中运行任务：它不在你可以使用的、带 GPU 且能运行任务的机器之中。',
    tk_profileInstead: '已改为选择 {first}。',
    tk_what: '运行什么', tk_modeCommand: '一条命令', tk_modeScript: '一个脚本',
    tk_command: '命令', tk_commandHint: '像命令解释器（`sh`）那样按空格拆分成参数（引号内的内容保持为一个参数），然后原样运行：不经过命令解释器。需要管道或多条命令时，请写成脚本。',
    tk_script: '脚本', tk_scriptHint: '按其 `#!` 行运行，没有则用 `sh` 运行。',
    tk_unclosedQuote: '有引号没有闭合。',
    tk_time: '时间上限', tk_timeHint: '时长，例如 `90m` 或 `4h`：到达上限时命令会收到 `SIGTERM`，随后被停止。此配置最长 {m} 小时。',
    tk_timeHintAny: '时长，例如 `90m` 或 `4h`：到达上限时命令会收到 `SIGTERM`，随后被停止。',
    tk_after: '最早开始时间（可选）', tk_afterHint: '你的本地时间。任务在此之前在队列中等待。',
    tk_killWait: '终止等待（可选）', tk_killWaitHint: '到达上限或取消时，从 `SIGTERM` 到停止之间的时间：`0s` 到 `10m`，留空为 `30s`。',
    tk_submitYes: '提交', tk_submitting: '正在提交…', tk_submitted: '任务 {id} 已提交：{state}。',
    tk_list: '你的任务', tk_none: '你还没有任务。', tk_more: '显示更早的任务',
    tk_state: '状态', tk_reason: '原因', tk_estimated: '预计开始', tk_exit: '退出码',
    tk_exitHint: '退出状态:信号，与 Slurm 的写法相同',
    tk_submittedAt: '提交时间', tk_started: '开始时间', tk_ended: '结束时间', tk_limit: '时间上限', tk_killWaitFact: '终止等待',
    tk_id: '任务', tk_output: '输出', tk_kept: '已保存', tk_details: '详情', tk_hide: '收起',
    tk_log: '任务 `{id}` 的输出', tk_following: '正在实时跟随输出…', tk_logEnded: '任务已结束：以上是它的全部输出。',
    tk_logNone: '还没有输出。', tk_logWaits: '命令尚未开始：开始后输出会显示在这里。',
    tk_logCut: '（此处不显示输出的开头：页面只保留最后 {n}）',
    tk_logError: '无法读取输出：{msg}',
    tk_cancel: '取消任务', tk_confirmCancel: '取消任务 {id}？等待中的任务，其虚拟机会被删除；正在运行的命令会收到 SIGTERM，终止等待之后被停止。',
    tk_cancelYes: '确定取消', tk_cancelAsked: '正在取消任务 {id}。', tk_cancelling: '正在取消…',
    tk_states: {pending: '等待中', booting: '启动中', running: '运行中', completing: '收尾中', completed: '已完成',
      failed: '失败', timeout: '超时', cancelled: '已取消', boot_fail: '启动失败', node_fail: '节点故障'},
    tk_sec: '{n} 秒', tk_min: '{n} 分钟', tk_hour: '{n} 小时',
  },
});

// coded: words with `…` spans (what one types: a duration, a signal, a
// program) shown as code.
const coded = (text) => text.split('`').map((part, i) => (i % 2 ? html`<code>${part}</code>` : part));

const ENDED = ['completed', 'failed', 'timeout', 'cancelled', 'boot_fail', 'node_fail'];
export const ended = (s) => ENDED.includes(s);
const stateWord = (s) => t('tk_states')[s] || s;
const PAGE = 20;
// The most output the page keeps of one task (characters): the rest is at
// the API.
const MAX_LOG = 1 << 20;

// shortID is the end of a task's ID, as its VM's name has it.
const shortID = (id) => id.replace(/-/g, '').slice(-8);

// exitWords: the end as Slurm writes it, "code:signal".
export const exitWords = (tk) => (tk.exit_code == null ? t('none') : `${tk.exit_code}:${tk.signal || 0}`);

// duration says seconds as hours, minutes and seconds.
function duration(secs) {
  const h = Math.floor(secs / 3600), m = Math.floor((secs % 3600) / 60), s = secs % 60;
  const parts = [];
  if (h) parts.push(t('tk_hour', {n: h}));
  if (m) parts.push(t('tk_min', {n: m}));
  if (s || !parts.length) parts.push(t('tk_sec', {n: s}));
  return parts.join(' ');
}

// splitWords splits a command line into words as a shell would: blanks
// between words, '…' and "…" keep words together, \ escapes the next
// character. It answers {words} or {error} (a quote not closed).
export function splitWords(line) {
  const words = [];
  let cur = '', inWord = false, quote = '';
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote === "'") {
      if (c === "'") quote = ''; else cur += c;
    } else if (quote === '"') {
      if (c === '"') quote = '';
      else if (c === '\\' && i + 1 < line.length && '"\\$`'.includes(line[i + 1])) cur += line[++i];
      else cur += c;
    } else if (c === "'" || c === '"') {
      quote = c; inWord = true;
    } else if (c === '\\' && i + 1 < line.length) {
      cur += line[++i]; inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) words.push(cur);
      cur = ''; inWord = false;
    } else {
      cur += c; inWord = true;
    }
  }
  if (quote) return {error: 'quote'};
  if (inWord) words.push(cur);
  return {words};
}

// quoteWord writes a word back as a shell reads it.
const quoteWord = (w) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(w) ? w : "'" + w.replace(/'/g, "'\\''") + "'");

// whatRuns: the command as one line, or the script's first line that says
// something.
function whatRuns(tk) {
  if (tk.command && tk.command.length) return tk.command.map(quoteWord).join(' ');
  const lines = (tk.script || '').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  return lines.length ? lines[0] + (lines.length > 1 ? ' …' : '') : (tk.script || '').trim();
}

// usable: the profiles a task may run in (api.canRunTask).
const usable = (ps) => (ps || []).filter(api.canRunTask);

const query = new URLSearchParams(location.search);

export default function Tasks({session}) {
  const [profiles, setProfiles] = useState(null);
  const [list, setList] = useState(null);
  const [limit, setLimit] = useState(PAGE);
  const [open, setOpen] = useState(query.get('task') || '');
  const [error, setError] = useState(null);
  const [said, setSaid] = useState('');
  const [live, setLive] = useState(false);
  const reload = useCallback(() => api.tasks(limit).then((r) => { setList(r.items || []); setError(null); }).catch(setError), [limit]);
  useEffect(() => { api.profiles().then((ps) => setProfiles(usable(ps))).catch(setError); }, []);
  useEffect(() => { reload(); }, [reload]);
  // A task's state follows its VM's: read again on any event of the
  // caller's VMs, and every few seconds while a task has not ended (its
  // runner's reports come without an event).
  useEvents(['vm.created', 'vm.state', 'vm.action'], reload, setLive, setError);
  const busy = list && list.some((tk) => !ended(tk.state));
  useEffect(() => {
    if (!busy) return undefined;
    const id = setInterval(reload, 3000);
    return () => clearInterval(id);
  }, [busy, reload]);
  const show = (id) => {
    setOpen(id);
    const u = new URL(location.href);
    if (id) u.searchParams.set('task', id); else u.searchParams.delete('task');
    u.searchParams.delete('profile');
    history.replaceState(null, '', u);
  };
  const submitted = (tk) => {
    setSaid(t('tk_submitted', {id: shortID(tk.id), state: stateWord(tk.state)}));
    reload();
    show(tk.id);
  };
  return html`<${Header} session=${session} />
  <main id="main" tabindex="-1" class="tasks">
    <div class="title-row"><h1>${t('tk_title')}</h1>
      <span class=${'live ' + (live ? 'on' : 'off')}>${live ? t('live') : t('offline')}</span></div>
    <p class="intro">${t('tk_intro')}</p>
    <${Problem} error=${error} />
    <p role="status" class="said">${said}</p>
    ${profiles && html`<${SubmitForm} profiles=${profiles} chosen=${query.get('profile') || ''} onDone=${submitted} />`}
    <section class="card" id="tasks" aria-labelledby="tasks-title">
      <h2 id="tasks-title">${t('tk_list')}</h2>
      ${!list && !error && html`<p class="hint" aria-busy="true">…</p>`}
      ${list && !list.length && html`<p id="no-tasks">${t('tk_none')}</p>`}
      ${list && list.length > 0 && html`<ul class="items">${list.map((tk) => html`<${TaskItem} key=${tk.id} tk=${tk}
        open=${open === tk.id} onToggle=${() => show(open === tk.id ? '' : tk.id)} onChanged=${reload} setSaid=${setSaid} />`)}</ul>`}
      ${list && list.length >= limit && limit < 1000 && html`<div class="buttons">
        <button type="button" class="quiet" id="more-tasks" onClick=${() => setLimit(Math.min(limit + PAGE, 1000))}>${t('tk_more')}</button></div>`}
    </section>
  </main>`;
}

// fieldOf is the form field a refusal belongs beside: the problem's field
// ("command[2]" is the command's), or '' for the form as a whole.
function fieldOf(err) {
  const f = (err && err.problem && err.problem.field) || '';
  if (f.startsWith('command')) return 'command';
  return ['profile', 'script', 'time_limit', 'start_at', 'kill_wait'].includes(f) ? f : '';
}

// Err shows a refusal in the server's words beside its field ('' : the
// refusals of no field).
function Err({id, err, field}) {
  if (!err || fieldOf(err) !== field) return null;
  return html`<p class="field-error" id=${id} role="alert">${err.message}</p>`;
}

// errAttrs mark a field a refusal names: invalid, described by its words
// (and by its hint).
const errAttrs = (err, field, id, hint) => (err && fieldOf(err) === field
  ? {'aria-invalid': 'true', 'aria-describedby': id + (hint ? ' ' + hint : '')} : hint ? {'aria-describedby': hint} : {});

// SubmitForm: the profile, a command or a script, the time limit, and
// optionally the earliest start and the kill wait.
function SubmitForm({profiles, chosen, onDone}) {
  const first = profiles.find((p) => p.name === chosen) || profiles[0];
  const [profile, setProfile] = useState(first ? first.name : '');
  const [mode, setMode] = useState('command');
  const [command, setCommand] = useState('');
  const [script, setScript] = useState('');
  const [time, setTime] = useState('');
  const [after, setAfter] = useState('');
  const [killWait, setKillWait] = useState('');
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const ref = useRef(null);
  // Opened from a profile's card: the form is where the eye goes.
  useEffect(() => { if (chosen && ref.current) ref.current.scrollIntoView({block: 'start'}); }, []);
  // A ?profile= the person cannot run a task in is said, not passed over.
  const refused = chosen && !profiles.some((x) => x.name === chosen) && html`<p class="notice" id="task-profile-refused" role="status">
    ${sentences(t('tk_profileRefused', {name: chosen}), profiles.length > 0 && t('tk_profileInstead', {first: profiles[0].name}))}</p>`;
  if (!profiles.length) return html`${refused}<p class="notice" id="no-task-profiles">${t('tk_noProfiles')}</p>`;
  const p = profiles.find((x) => x.name === profile) || profiles[0];
  const max = p.lease && p.lease.max ? hoursOf(p.lease.max) : 0;
  const fail = (field, message) => setErr(Object.assign(new Error(message), {problem: {field}}));
  const submit = async (e) => {
    e.preventDefault();
    const body = {profile: p.name, time_limit: time.trim()};
    if (mode === 'command') {
      const r = splitWords(command);
      if (r.error) return fail('command', t('tk_unclosedQuote'));
      body.command = r.words;
    } else {
      body.script = script;
    }
    if (killWait.trim()) body.kill_wait = killWait.trim();
    if (after) body.start_at = new Date(after).toISOString();
    setBusy(true);
    try {
      const tk = await api.submitTask(body);
      setErr(null); setCommand(''); setScript('');
      onDone(tk);
    } catch (x) { setErr(x); } finally { setBusy(false); }
    return undefined;
  };
  return html`<form class="card" id="submit-task" ref=${ref} onSubmit=${submit} aria-labelledby="submit-title">
    <h2 id="submit-title">${t('tk_submit')}</h2>
    ${refused}
    <div class="row">
      <div class="field"><label for="task-profile">${t('tk_profile')}</label>
        <select id="task-profile" value=${p.name} onChange=${(e) => setProfile(e.target.value)} ...${errAttrs(err, 'profile', 'task-profile-error', 'task-profile-hint')}>
          ${profiles.map((x) => html`<option value=${x.name}>${x.name} — ${gpuWords(x.gpu)}</option>`)}
        </select>
        <p class="hint" id="task-profile-hint">${t('tk_profileHint')}</p>
        <${Err} id="task-profile-error" err=${err} field="profile" /></div>
      <div class="field"><label for="task-time">${t('tk_time')}</label>
        <input id="task-time" value=${time} required autocomplete="off" onInput=${(e) => setTime(e.target.value)}
          ...${errAttrs(err, 'time_limit', 'task-time-error', 'task-time-hint')} />
        <p class="hint" id="task-time-hint">${coded(max ? t('tk_timeHint', {m: max}) : t('tk_timeHintAny'))}</p>
        <${Err} id="task-time-error" err=${err} field="time_limit" /></div>
    </div>
    <fieldset class="mode"><legend>${t('tk_what')}</legend>
      <label class="choice"><input type="radio" name="task-mode" id="task-mode-command" value="command" checked=${mode === 'command'}
        onChange=${() => setMode('command')} /> ${t('tk_modeCommand')}</label>
      <label class="choice"><input type="radio" name="task-mode" id="task-mode-script" value="script" checked=${mode === 'script'}
        onChange=${() => setMode('script')} /> ${t('tk_modeScript')}</label>
    </fieldset>
    ${mode === 'command' ? html`<div class="field"><label for="task-command">${t('tk_command')}</label>
        <input id="task-command" class="mono" value=${command} required autocomplete="off" spellcheck="false"
          onInput=${(e) => setCommand(e.target.value)} ...${errAttrs(err, 'command', 'task-command-error', 'task-command-hint')} />
        <p class="hint" id="task-command-hint">${coded(t('tk_commandHint'))}</p>
        <${Err} id="task-command-error" err=${err} field="command" /></div>`
      : html`<div class="field"><label for="task-script">${t('tk_script')}</label>
        <textarea id="task-script" class="mono" rows="6" required spellcheck="false" value=${script}
          onInput=${(e) => setScript(e.target.value)} ...${errAttrs(err, fieldOf(err) === 'command' ? 'command' : 'script', 'task-script-error', 'task-script-hint')}></textarea>
        <p class="hint" id="task-script-hint">${coded(t('tk_scriptHint'))}</p>
        <${Err} id="task-script-error" err=${err} field="script" />
        <${Err} id="task-script-error" err=${err} field="command" /></div>`}
    <div class="row">
      <div class="field"><label for="task-after">${t('tk_after')}</label>
        <input id="task-after" type="datetime-local" value=${after} onInput=${(e) => setAfter(e.target.value)}
          ...${errAttrs(err, 'start_at', 'task-after-error', 'task-after-hint')} />
        <p class="hint" id="task-after-hint">${t('tk_afterHint')}</p>
        <${Err} id="task-after-error" err=${err} field="start_at" /></div>
      <div class="field"><label for="task-killwait">${t('tk_killWait')}</label>
        <input id="task-killwait" value=${killWait} autocomplete="off" onInput=${(e) => setKillWait(e.target.value)}
          ...${errAttrs(err, 'kill_wait', 'task-killwait-error', 'task-killwait-hint')} />
        <p class="hint" id="task-killwait-hint">${coded(t('tk_killWaitHint'))}</p>
        <${Err} id="task-killwait-error" err=${err} field="kill_wait" /></div>
    </div>
    <${Err} id="submit-task-error" err=${err} field="" />
    <div class="buttons"><button type="submit" disabled=${busy}>${busy ? t('tk_submitting') : t('tk_submitYes')}</button></div>
  </form>`;
}

// TaskItem: one task in the list: what it runs, its state (and why), its
// end and times; its details open below it.
function TaskItem({tk, open, onToggle, onChanged, setSaid}) {
  const id = 'task-' + tk.id;
  return html`<li id=${id} data-state=${tk.state}>
    <div class="task-head">
      <h3 id=${id + '-what'}><code class="cmd">${whatRuns(tk)}</code></h3>
      <button type="button" class="quiet" aria-expanded=${open} aria-controls=${id + '-details'}
        aria-describedby=${id + '-what'} onClick=${onToggle}>${open ? t('tk_hide') : t('tk_details')}</button>
    </div>
    <dl class="facts">
      <div><dt>${t('tk_state')}</dt><dd class=${'state t-' + tk.state}>${stateWord(tk.state)}</dd></div>
      ${tk.reason && html`<div><dt>${t('tk_reason')}</dt><dd class="reason">${tk.reason}</dd></div>`}
      ${tk.estimated_start && html`<div><dt>${t('tk_estimated')}</dt><dd class="estimated"><time datetime=${tk.estimated_start}>${fmtTime(tk.estimated_start)}</time></dd></div>`}
      <div><dt>${t('tk_profile')}</dt><dd>${tk.profile}</dd></div>
      <div><dt>${t('tk_exit')}</dt><dd class="exit" title=${t('tk_exitHint')}>${exitWords(tk)}</dd></div>
      <div><dt>${t('tk_submittedAt')}</dt><dd><time datetime=${tk.created_at}>${fmtTime(tk.created_at)}</time></dd></div>
      ${tk.started_at && html`<div><dt>${t('tk_started')}</dt><dd><time datetime=${tk.started_at}>${fmtTime(tk.started_at)}</time></dd></div>`}
      ${tk.ended_at && html`<div><dt>${t('tk_ended')}</dt><dd><time datetime=${tk.ended_at}>${fmtTime(tk.ended_at)}</time></dd></div>`}
    </dl>
    ${open && html`<${TaskDetails} id=${id + '-details'} first=${tk} onChanged=${onChanged} setSaid=${setSaid} />`}
  </li>`;
}

// TaskDetails: the task as GET /v1/tasks/{id} says it (with a pending
// one's expected start), its output followed until the task has ended,
// and its cancel.
function TaskDetails({id, first, onChanged, setSaid}) {
  const [tk, setTk] = useState(first);
  const [log, setLog] = useState('');
  const [cut, setCut] = useState(false);
  const [following, setFollowing] = useState(true);
  const [logErr, setLogErr] = useState(null);
  const [confirm, setConfirm] = useState(false);
  const [cancelling, setCancelling] = useState(false);
  const [err, setErr] = useState(null);
  const pre = useRef(null);
  const sid = shortID(first.id);
  // The task as GET of one says it (a pending one's expected start), now
  // and every few seconds until it has ended.
  useEffect(() => {
    if (ended(tk.state)) return undefined;
    const get = () => api.task(first.id).then(setTk).catch(() => {});
    get();
    const timer = setInterval(get, 5000);
    return () => clearInterval(timer);
  }, [first.id, ended(tk.state)]);
  // The list's state is newer than ours when it changes.
  useEffect(() => { if (first.state !== tk.state) setTk((cur) => ({...cur, ...first})); }, [first.state]);
  useEffect(() => follow(first.id, {setTk, setFollowing, setLogErr, add: (s) => setLog((l) => {
    const all = l + s;
    if (all.length <= MAX_LOG) return all;
    setCut(true);
    return all.slice(all.length - MAX_LOG);
  })}), [first.id]);
  // Keep the end of the output in view while it grows, unless the reader
  // scrolled up.
  const atEnd = useRef(true);
  useEffect(() => { const p = pre.current; if (p && atEnd.current) p.scrollTop = p.scrollHeight; }, [log]);
  const onScroll = (e) => { const p = e.target; atEnd.current = p.scrollTop + p.clientHeight >= p.scrollHeight - 4; };
  const cancel = async () => {
    setConfirm(false);
    try {
      setTk(await api.cancelTask(first.id));
      setCancelling(true); setErr(null);
      setSaid(t('tk_cancelAsked', {id: sid}));
      onChanged();
    } catch (x) { setErr(x); }
  };
  const waiting = !log && !tk.started_at && !ended(tk.state);
  return html`<div class="details" id=${id}>
    <dl class="facts">
      <div><dt>${t('tk_id')}</dt><dd><code>${tk.id}</code></dd></div>
      ${tk.estimated_start && !ended(tk.state) && html`<div><dt>${t('tk_estimated')}</dt><dd class="estimated" id=${id + '-estimated'}>
        <time datetime=${tk.estimated_start}>${fmtTime(tk.estimated_start)}</time> (${fmtRelative(tk.estimated_start)})</dd></div>`}
      <div><dt>${t('tk_limit')}</dt><dd>${duration(tk.time_limit_s)}</dd></div>
      <div><dt>${t('tk_killWaitFact')}</dt><dd>${duration(tk.kill_wait_s)}</dd></div>
      <div><dt>${t('tk_output')}</dt><dd>${fmtBytes(tk.log_bytes || 0)} ${t('tk_kept')}</dd></div>
    </dl>
    ${tk.script && html`<pre class="script" tabindex="0" aria-label=${t('tk_script')}><code>${tk.script}</code></pre>`}
    <h4 id=${id + '-log-title'}>${coded(t('tk_log', {id: sid}))}</h4>
    ${cut && html`<p class="hint">${t('tk_logCut', {n: fmtBytes(MAX_LOG)})}</p>`}
    <pre class="log" id=${id + '-log'} ref=${pre} tabindex="0" role="log" aria-labelledby=${id + '-log-title'} onScroll=${onScroll}>${log}</pre>
    <p class="hint log-state" id=${id + '-log-state'} aria-live="polite">${logErr ? t('tk_logError', {msg: logErr.message})
      : waiting ? t('tk_logWaits') : following ? t('tk_following') : (log ? t('tk_logEnded') : sentences(t('tk_logNone'), t('tk_logEnded')))}</p>
    ${!ended(tk.state) && html`<div class="buttons">
      <button type="button" class="danger" id=${id + '-cancel'} disabled=${cancelling} onClick=${() => setConfirm(true)}>${cancelling ? t('tk_cancelling') : t('tk_cancel')}</button></div>`}
    <${Problem} error=${err} />
    ${confirm && html`<${Confirm} text=${t('tk_confirmCancel', {id: sid})} yes=${t('tk_cancelYes')} danger=${true}
      onYes=${cancel} onNo=${() => setConfirm(false)} />`}
  </div>`;
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const id = setTimeout(resolve, ms);
  signal.addEventListener('abort', () => { clearTimeout(id); resolve(); });
});

// follow reads a task's output as it comes: the logs with follow=1 until
// the answer ends, then the task: ended, the rest of its output once and
// done; else (the connection dropped) again from where it stopped. It
// answers the function that stops it.
function follow(taskID, {setTk, setFollowing, setLogErr, add}) {
  const ctl = new AbortController();
  const {signal} = ctl;
  (async () => {
    let off = 0;
    for (;;) {
      try {
        off = await api.taskLogs(taskID, off, true, add, signal);
        setLogErr(null);
      } catch (e) {
        if (signal.aborted) return;
        setLogErr(e);
      }
      if (signal.aborted) return;
      let cur = null;
      try { cur = await api.task(taskID); setTk(cur); } catch (e) { if (!signal.aborted) setLogErr(e); }
      if (signal.aborted) return;
      if (cur && ended(cur.state)) {
        try { await api.taskLogs(taskID, off, false, add, signal); } catch (e) { if (!signal.aborted) setLogErr(e); }
        setFollowing(false);
        return;
      }
      await sleep(1000, signal);
      if (signal.aborted) return;
    }
  })();
  return () => ctl.abort();
}
