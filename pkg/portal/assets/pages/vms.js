// pages/vms.js: /vms, the signed-in person's VMs (an admin may show
// everybody's, with their owners), live over the events stream, with
// exactly what each VM offers (its access, from its profile): its desktop
// (the browser console, a .vv or .rdp file, Moonlight, DCV), its display
// console, SSH, the one-time desktop password; and extend the lease,
// reboot, stop, start, delete.
import {html, useState, useEffect, useCallback, useRef} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t, addWords, lang, stateWord, phaseWord, fmtTime, fmtRelative, hoursOf} from '../i18n.js';
import {Header, Problem, Confirm, useEvents} from '../ui.js';

// virtiofsDied starts the reason of a running VM whose virtiofs daemon died
// (orchestrator.VirtiofsReasonPrefix): its home and shares hang.
const virtiofsDied = 'the file server of its home and shares (virtiofsd) stopped';

addWords({
  en: {
    vm_licensed: 'licensed', vm_grace: 'not licensed: grace period, it will be throttled', vm_unlicensed: 'not licensed: throttled (ask your admin{admin})',
    vm_reboot: 'Reboot', vm_extend: 'Extend', vm_left: '{d} left', vm_leftSecs: '{s} s left', vm_leaseEnded: 'the lease has ended',
    vm_endsSoon: 'ends soon', vm_leaseHours: '{h} h, counted from when it runs',
    vm_confirmReboot: 'Reboot {name}? Its guest restarts now: work not saved in it is lost.',
    vm_extendTitle: 'Extend the lease of {name}', vm_extendHours: 'Hours to add',
    vm_extendHint: 'At most {room} more: the profile allows {max} h and {name} has {h} h.',
    vm_extendHintNoMax: '{name} has {h} h.', vm_extendNewEnd: 'The lease would end {at}.',
    vm_extendQueued: 'The lease of a queued VM starts when it runs.',
    vm_extendFull: '{name} has {h} h, the most its profile allows: it cannot be extended. Ask your admin{admin}, or make a new VM when it ends.',
    vm_extendYes: 'Extend', vm_extending: 'Extending…', vm_close: 'Close',
    vm_extendWhole: 'Write a whole number of hours, at least 1.',
    vm_extended: 'The lease of {name} is extended by {n} h.', vm_extendedEnd: 'The lease of {name} is extended by {n} h: it ends {at}.',
    vm_expected: 'Expected to start about {at} ({rel}).', vm_expectedPast: 'Expected to start any moment now (the estimate was about {at}).',
    vm_uncertain: 'Uncertain: {note}', vm_uncertainNoNote: 'Uncertain: running VMs may be extended or deleted early.',
    vm_estimateUpdating: 'The queue changed since: being updated.',
    vm_gpuMig: 'MIG {p} on {on}', vm_gpuVgpu: '{t} vGPU on {on}', vm_gpuWhole: 'whole {on}', vm_gpuAny: 'GPU',
    vm_copy: 'Copy', vm_copied: 'Copied {what}.', vm_copyFailed: 'Could not copy: select the text and copy it yourself.',
    vm_virtiofsDied: 'The file server of this VM\'s home and shares stopped: in the VM they hang. Your files are safe on the server. Stop the VM and start it again to get them back.',
    vm_awayFromHome: 'This VM runs on {host}, but the home of {owner} is on {home}, which could not serve it: the home it mounts is another folder, on {host}, without the files of the home on {home}.',
    vm_driverChange: 'The hosts\' NVIDIA vGPU manager moves to {driver} on {at}{note}: the NVIDIA driver inside {name} must then be one it supports.',
    vm_driverSnapOffer: 'Take a snapshot of its disk first, labelled {label}, to go back to if the new driver does not work:',
    vm_driverSnap: 'Take a snapshot', vm_driverSnapTaken: 'A snapshot labelled {label} is being taken: My storage shows it.',
    vm_driverNoSnap: 'Its disk cannot be snapshotted: it boots a kernel directly.',
    vm_desktopTitle: 'Desktop of {name}',
    vm_rdpHow: 'Remote Desktop (RDP) listens in the guest on port {port}, reached through gpuvmd: run this on your computer; it opens the tunnel and your RDP client.',
    vm_rdpFile: 'Or keep a tunnel open on 127.0.0.1:{port} with the command below and open the .rdp file in your RDP client (its user is {user}; it asks for the password).',
    vm_rdpDownload: 'Download {name}.rdp',
    vm_spiceHow: 'The desktop is the SPICE display: open the file with virt-viewer (remote-viewer). It holds a one-time display password and deletes itself.',
    vm_vvDownload: 'Download {name}.vv',
    vm_sunshineHow: 'Sunshine streams the desktop to Moonlight through gpuvmd\'s tunnels: run this on your computer and keep it running.',
    vm_sunshineHost: 'Then add the host {host} in Moonlight and pair it with the PIN Moonlight shows (gpuvm desktop {name} --pin NNNN, or Sunshine\'s web page below).',
    vm_sunshineWeb: 'Sunshine\'s web page (PIN)',
    vm_dcvHow: 'Amazon DCV listens in the guest on port {port}, reached through gpuvmd: run this on your computer and keep it running; then open DCV in the browser or in DCV\'s client.',
    vm_dcvWeb: 'DCV in the browser', vm_dcvLink: 'DCV\'s client (dcv://)',
    vm_noneHow: 'This VM has neither a display nor a desktop: reach its guest with SSH through gpuvmd.',
    vm_console: 'Browser console (boot screens)', vm_hideDesktop: 'Hide',
    vm_showPassword: 'Show password once',
    vm_confirmPassword: 'Show the desktop password of {name} now? It is shown only once: gpuvmd forgets it, and asking again is refused. Have your password manager ready.',
    vm_confirmPasswordYes: 'Show it now',
    vm_passwordTitle: 'Desktop password of {name}', vm_user: 'User', vm_password: 'Password',
    vm_passwordWarn: 'Shown once: copy it now. When you hide it or leave this page it is gone.',
    vm_hide: 'Hide', vm_passwordRefused: 'The password is not shown: {msg}',
    vm_passwordRead: 'This password was read on {at}. It is shown only once and gpuvmd keeps no copy: set a new one inside the guest (gpuvm ssh {name}, then passwd), or make a new VM.',
    vm_openConsole: 'Console', vm_ssh: 'SSH', vm_owner: 'Owner',
    vm_everyone: 'Everybody\'s VMs', vm_everyoneHint: 'As an admin you may show everybody\'s VMs here, with their owners.',
    vm_caps: 'What its state allows', vm_capDisk: 'Disk snapshot', vm_capMemory: 'RAM snapshot', vm_capSuspend: 'Suspend',
    vm_capMigrate: 'Live migration', vm_capYes: 'yes', vm_capNo: 'no', vm_capBasis: 'Judged on: {basis}',
  },
  'zh-CN': {
    vm_licensed: '已授权', vm_grace: '未授权：宽限期内，之后将被限速', vm_unlicensed: '未授权：已被限速（请联系管理员{admin}）',
    vm_reboot: '重启', vm_extend: '延长', vm_left: '剩余 {d}', vm_leftSecs: '剩余 {s} 秒', vm_leaseEnded: '租期已结束',
    vm_endsSoon: '即将结束', vm_leaseHours: '{h} 小时，从运行时开始计算',
    vm_confirmReboot: '重启 {name}？客户机将立即重启，未保存的工作会丢失。',
    vm_extendTitle: '延长 {name} 的租期', vm_extendHours: '增加的小时数',
    vm_extendHint: '最多还能增加 {room} 小时：该配置最长 {max} 小时，{name} 已有 {h} 小时。',
    vm_extendHintNoMax: '{name} 已有 {h} 小时。', vm_extendNewEnd: '租期将于 {at} 结束。',
    vm_extendQueued: '排队中的虚拟机，租期从运行时开始计算。',
    vm_extendFull: '{name} 已有 {h} 小时，达到该配置的上限，无法再延长。请联系管理员{admin}，或在到期后新建虚拟机。',
    vm_extendYes: '延长', vm_extending: '正在延长…', vm_close: '关闭',
    vm_extendWhole: '请输入整数小时数，至少 1。',
    vm_extended: '{name} 的租期已延长 {n} 小时。', vm_extendedEnd: '{name} 的租期已延长 {n} 小时，将于 {at} 结束。',
    vm_expected: '预计约 {at} 启动（{rel}）。', vm_expectedPast: '预计随时启动（原估计约 {at}）。',
    vm_uncertain: '不确定：{note}', vm_uncertainNoNote: '不确定：运行中的虚拟机可能被延长或提前删除。',
    vm_estimateUpdating: '队列此后有变化：正在更新。',
    vm_gpuMig: '{on} 上的 MIG {p}', vm_gpuVgpu: '{on} 上的 {t} 虚拟 GPU', vm_gpuWhole: '整块 {on}', vm_gpuAny: 'GPU',
    vm_copy: '复制', vm_copied: '已复制 {what}。', vm_copyFailed: '无法复制：请手动选中文本复制。',
    vm_virtiofsDied: '此虚拟机的主目录和共享的文件服务已停止：它们在虚拟机中无响应。你的文件在服务器上安然无恙。停止虚拟机再启动即可恢复。',
    vm_awayFromHome: '此虚拟机运行在 {host} 上，但 {owner} 的主目录在 {home} 上，而 {home} 当时无法运行它：它挂载的主目录是 {host} 上的另一个文件夹，其中没有 {home} 上主目录的文件。',
    vm_driverChange: '主机的 NVIDIA vGPU 管理器将于 {at} 升级到 {driver}{note}：届时 {name} 内的 NVIDIA 驱动必须是它支持的版本。',
    vm_driverSnapOffer: '请先为它的磁盘拍一个快照（标签 {label}），新驱动不可用时可以恢复：',
    vm_driverSnap: '拍快照', vm_driverSnapTaken: '正在拍标签为 {label} 的快照：可在“我的存储”中查看。',
    vm_driverNoSnap: '它的磁盘无法拍快照：它直接引导内核。',
    vm_desktopTitle: '{name} 的桌面',
    vm_rdpHow: '远程桌面（RDP）在客户机的 {port} 端口监听，需经 gpuvmd 访问：在你的电脑上运行下面的命令，它会打开隧道并启动 RDP 客户端。',
    vm_rdpFile: '或者用下面的命令在 127.0.0.1:{port} 保持隧道，再用 RDP 客户端打开 .rdp 文件（用户为 {user}，密码会在连接时询问）。',
    vm_rdpDownload: '下载 {name}.rdp',
    vm_spiceHow: '桌面是 SPICE 显示：用 virt-viewer（remote-viewer）打开该文件。文件含一次性显示密码，用后自动删除。',
    vm_vvDownload: '下载 {name}.vv',
    vm_sunshineHow: 'Sunshine 经 gpuvmd 的隧道把桌面串流到 Moonlight：在你的电脑上运行下面的命令并保持运行。',
    vm_sunshineHost: '然后在 Moonlight 中添加主机 {host}，并用 Moonlight 显示的 PIN 配对（gpuvm desktop {name} --pin NNNN，或下面的 Sunshine 网页）。',
    vm_sunshineWeb: 'Sunshine 网页（PIN）',
    vm_dcvHow: 'Amazon DCV 在客户机的 {port} 端口监听，需经 gpuvmd 访问：在你的电脑上运行下面的命令并保持运行，然后在浏览器或 DCV 客户端中打开。',
    vm_dcvWeb: '在浏览器中打开 DCV', vm_dcvLink: 'DCV 客户端（dcv://）',
    vm_noneHow: '该虚拟机没有显示也没有桌面：请经 gpuvmd 用 SSH 连接客户机。',
    vm_console: '浏览器控制台（启动画面）', vm_hideDesktop: '收起',
    vm_showPassword: '显示一次密码',
    vm_confirmPassword: '现在显示 {name} 的桌面密码？密码只显示一次：之后 gpuvmd 不再保存，再次请求会被拒绝。请先准备好密码管理器。',
    vm_confirmPasswordYes: '现在显示',
    vm_passwordTitle: '{name} 的桌面密码', vm_user: '用户', vm_password: '密码',
    vm_passwordWarn: '只显示一次：请立即复制。收起或离开本页后将无法再看到。',
    vm_hide: '收起', vm_passwordRefused: '密码未显示：{msg}',
    vm_passwordRead: '该密码已于 {at} 被读取。密码只显示一次，gpuvmd 不保留副本：请在客户机内设置新密码（gpuvm ssh {name}，然后 passwd），或新建虚拟机。',
    vm_openConsole: '控制台', vm_ssh: 'SSH', vm_owner: '所有者',
    vm_everyone: '所有人的虚拟机', vm_everyoneHint: '作为管理员，你可以在这里显示所有人的虚拟机及其所有者。',
    vm_caps: '其状态允许的操作', vm_capDisk: '磁盘快照', vm_capMemory: '内存快照', vm_capSuspend: '挂起',
    vm_capMigrate: '热迁移', vm_capYes: '可以', vm_capNo: '不可以', vm_capBasis: '依据：{basis}',
  },
});

const finished = (vm) => vm.state === 'deleted';
// GET /v1/vms/{id} of these states says more than the list: addresses and
// the console (running), the estimated start (queued).
// detailed: a VM read whole (GET /v1/vms/{id}) for its card: running or
// queued, or stopped with a vGPU (driver changes concern it).
const detailed = (vm, prof) => vm.state === 'running' || vm.state === 'queued' ||
  (vm.state === 'stopped' && !!prof && !!prof.gpu && (prof.gpu.kind === 'vgpu' || prof.gpu.kind === 'mig'));
// wholeOnly are the fields of GET /v1/vms/{id} that lists never have.
const wholeOnly = ['addresses', 'console', 'desktop', 'capabilities', 'driver_changes',
  'estimated_start', 'estimated_start_uncertain', 'estimated_start_note', 'estimate_computed_at'];
const actionWord = (a) => t({reboot: 'vm_reboot', extend: 'vm_extend'}[a] || a);
const MIN = 60000;

// span says h hours m minutes ("2 h 5 min", "2 小时 5 分钟").
function span(mins) {
  const h = Math.floor(mins / 60), m = mins % 60;
  const unit = lang === 'zh-CN' ? [' 小时', ' 分钟'] : [' h', ' min'];
  return (h ? h + unit[0] + (m ? ' ' : '') : '') + (m || !h ? m + unit[1] : '');
}

// leaseLeft is the lease's countdown: minutes (seconds in the last one),
// warn under 30 minutes.
export function leaseLeft(iso, now) {
  const ms = new Date(iso).getTime() - now;
  if (ms <= 0) return {text: t('vm_leaseEnded'), warn: true};
  if (ms < MIN) return {text: t('vm_leftSecs', {s: Math.ceil(ms / 1000)}), warn: true};
  return {text: t('vm_left', {d: span(Math.floor(ms / MIN))}), warn: ms < 30 * MIN};
}

// clock is a time in the viewer's zone: the time alone today, else with
// the date.
const timeOnly = new Intl.DateTimeFormat(lang, {timeStyle: 'short'});
function clock(iso, now) {
  const d = new Date(iso);
  return d.toDateString() === new Date(now).toDateString() ? timeOnly.format(d) : fmtTime(iso);
}

// estimate says when a queued VM is expected to start (GET /v1/vms/{id}'s
// estimated_start); null without one.
export function estimate(vm, now) {
  if (vm.state !== 'queued' || !vm.estimated_start || isNaN(new Date(vm.estimated_start))) return null;
  const at = clock(vm.estimated_start, now);
  const text = new Date(vm.estimated_start).getTime() > now
    ? t('vm_expected', {at, rel: fmtRelative(vm.estimated_start, now)}) : t('vm_expectedPast', {at});
  const uncertain = vm.estimated_start_uncertain
    ? (vm.estimated_start_note ? t('vm_uncertain', {note: vm.estimated_start_note}) : t('vm_uncertainNoNote')) : '';
  return {text, uncertain, stale: !!vm.estimate_stale};
}

// gpuHeld says what GPU a VM holds, in words: "MIG 1g.10gb on H100
// 0000:41:00.0" (the model from the VM's profile, when it names one).
export function gpuHeld(g, prof) {
  const model = prof && prof.gpu && prof.gpu.model;
  const on = [model || t('vm_gpuAny'), g.address].filter(Boolean).join(' ');
  switch (g.kind) {
    case 'mig': return t('vm_gpuMig', {p: g.type, on});
    case 'vgpu': return t('vm_gpuVgpu', {t: g.type, on});
    case 'passthrough': return t('vm_gpuWhole', {on});
  }
  return [g.type || g.kind, g.address].filter(Boolean).join(' ');
}

// copyText puts text on the clipboard: the Clipboard API where the page is
// a secure context, else a selected, off-screen text area.
async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (_) {
    const ta = document.createElement('textarea');
    ta.value = text;
    ta.setAttribute('readonly', '');
    ta.className = 'copy-buffer';
    document.body.append(ta);
    ta.select();
    let ok = false;
    try { ok = document.execCommand('copy'); } catch (_) { ok = false; }
    ta.remove();
    return ok;
  }
}

// accessOf is what a VM offers (the API's access, from its profile); from a
// server that does not say, its desktop (GET /v1/vms/{id}) and display.
export function accessOf(vm) {
  if (vm.access) return vm.access;
  const console = (vm.console && vm.console.protocol) || '';
  return {desktop: ['rdp', 'sunshine', 'dcv'].includes(vm.desktop) ? vm.desktop : '', console, ssh: true, tunnels: true,
    password: vm.desktop === 'rdp' || vm.desktop === 'dcv'};
}

// shownVM is the VM its card draws: d, its whole read (GET /v1/vms/{id}),
// while the list's vm is no newer. Changed since, in the same state (a
// lease extended, a reboot asked), the card keeps what only the whole read
// has until it is read again (load does at once), so it neither shrinks
// nor grows under the pointer; its estimate says it is being made again.
// In another state, none of it holds.
function shownVM(vm, d) {
  if (!d || d.updated_at === vm.updated_at) return d || vm;
  if (d.state !== vm.state) return vm;
  const n = {...vm};
  wholeOnly.forEach((k) => { if (n[k] === undefined && d[k] !== undefined) n[k] = d[k]; });
  if (n.estimate_computed_at) n.estimate_stale = true;
  return n;
}

// endsWithin: the VM's lease ends within ms of now (not already ended).
function endsWithin(vm, now, ms) {
  const left = vm.lease_end ? new Date(vm.lease_end).getTime() - now : -1;
  return left > 0 && left < ms;
}

export default function VMs({session}) {
  const [vms, setVMs] = useState(null);
  const [details, setDetails] = useState({});
  const [profiles, setProfiles] = useState({});
  const [error, setError] = useState(null);
  const [live, setLive] = useState(false);
  const [confirm, setConfirm] = useState(null);
  const [extending, setExtending] = useState(null);
  const [panels, setPanels] = useState({}); // VM ID: the desktop panel open
  const [creds, setCreds] = useState({}); // VM ID: its password, shown, or why not
  const [said, setSaid] = useState('');
  const [now, setNow] = useState(Date.now());
  const me = session.user.name;
  const admin = !!session.user.admin;
  const [everyone, setEveryone] = useState(false); // an admin's: everybody's VMs

  // The profiles give the lease's maximum and the GPU's model: read once,
  // with the first list, and drawn with it (one render, not two).
  const profilesOnce = useRef(null);
  const load = useCallback(async () => {
    try {
      profilesOnce.current = profilesOnce.current || api.call('GET', '/v1/profiles')
        .then((ps) => Object.fromEntries((ps || []).map((p) => [p.name, p]))).catch(() => ({}));
      // My VMs are the person's own: an admin's list would be everybody's.
      const [all, profs] = await Promise.all([api.allVMs(everyone ? '' : me), profilesOnce.current]);
      const items = all.filter((vm) => !finished(vm));
      setProfiles(profs);
      setVMs(items);
      // Addresses, the console and the estimated start are in GET
      // /v1/vms/{id} only: read them for the running and queued VMs (a
      // few at a time).
      // They are drawn once all are read: a re-render of a long list per
      // four answers would be slow on an old laptop.
      const more = items.filter((vm) => detailed(vm, profs[vm.profile])).slice(0, 50);
      const got = [];
      for (let i = 0; i < more.length; i += 4) {
        got.push(...await Promise.all(more.slice(i, i + 4).map((vm) => api.getVM(vm.id).catch(() => null))));
      }
      if (got.length) setDetails((d) => { const n = {...d}; got.forEach((g) => g && (n[g.id] = g)); return n; });
    } catch (err) { setError(err); }
  }, [everyone, me]);

  // When the list is first drawn (effects run after the paint): read by
  // BenchmarkMyVMs200.
  useEffect(() => { if (vms && !window.gpuvmRendered) window.gpuvmRendered = performance.now(); }, [vms]);

  useEffect(() => { load(); }, [load]);
  // An estimate made before the queue's last change is being made again
  // (estimate_stale): no event says when it is done, so read once more.
  const stale = Object.values(details).some((d) => d.state === 'queued' && d.estimate_stale);
  useEffect(() => {
    if (!stale) return undefined;
    const again = setTimeout(load, 3000);
    return () => clearTimeout(again);
  }, [stale, details, load]);
  // Any event of the caller's VMs: read the list again.
  useEvents(['vm.created', 'vm.state', 'vm.action', 'vm.warning'], load, setLive, setError);
  // The countdowns: every second while a lease is in its last minute,
  // else every 15 s.
  const fast = (vms || []).some((vm) => endsWithin(vm, now, 2 * MIN));
  useEffect(() => {
    const tick = setInterval(() => setNow(Date.now()), fast ? 1000 : 15000);
    return () => clearInterval(tick);
  }, [fast]);

  const shown = (vm) => shownVM(vm, details[vm.id]);

  const act = async (vm, action) => {
    setConfirm(null);
    if (action === 'password') return reveal(vm);
    try {
      if (action === 'delete') await api.deleteVM(vm.id);
      else await api.vmAction(vm.id, action);
      setSaid(t('done', {action: actionWord(action), name: vm.name}));
      load();
    } catch (err) { setError(err); }
  };
  const reveal = async (vm) => {
    try {
      const c = await api.vmCredentials(vm.id);
      setCreds((m) => ({...m, [vm.id]: {user: c.user, password: c.password}}));
    } catch (err) {
      if (err.status === 401) return;
      // Read before: when, in the reader's zone, and what to do (once).
      const read = err.problem.type === 'https://gpuvm.dev/problems/credentials-read' && err.problem.read_at;
      setCreds((m) => ({...m, [vm.id]: {error: read ? t('vm_passwordRead', {at: fmtTime(read), name: vm.name}) : t('vm_passwordRefused', {msg: err.message})}}));
    }
  };
  const extended = (before, after, hours) => {
    setExtending(null);
    setSaid(after && after.lease_end
      ? t('vm_extendedEnd', {name: before.name, n: hours, at: fmtTime(after.lease_end)}) : t('vm_extended', {name: before.name, n: hours}));
    load();
  };
  const browserConsole = async (vm) => {
    const w = window.open('', '_blank');
    try {
      const c = await api.consoleTicket(vm.id);
      if (!c.browser_url) throw new Error(c.desktop && c.desktop.message || 'no browser console');
      if (w) { w.opener = null; w.location = c.browser_url; } else location.assign(c.browser_url);
    } catch (err) { if (w) w.close(); setError(err); }
  };
  // desktop opens the VM's desktop as its profile says: the browser
  // console in a new tab (vnc), else the card's desktop panel, with what
  // it needs read first.
  const desktop = async (vm, proto = accessOf(vm).desktop) => {
    if (proto === 'vnc') return browserConsole(vm);
    if (panels[vm.id]) { setPanels((p) => { const n = {...p}; delete n[vm.id]; return n; }); return; }
    const panel = {proto};
    try {
      if (proto === 'rdp') panel.rdp = parseRDP(await api.desktopRDP(vm.id));
      if (proto === 'sunshine' || proto === 'dcv') panel.con = await api.consoleTicket(vm.id);
    } catch (err) { panel.error = err.message; }
    setPanels((p) => ({...p, [vm.id]: panel}));
  };
  const copied = async (text, what) => setSaid(await copyText(text) ? t('vm_copied', {what}) : t('vm_copyFailed'));

  return html`<${Header} session=${session} />
  <main id="main" tabindex="-1">
    <div class="title-row">
      <h1>${t('vms')}</h1>
      <span class=${'live ' + (live ? 'on' : 'off')} id="live">${live ? t('live') : t('offline')}</span>
    </div>
    <p class="intro">${t('vmsIntro')}</p>
    <${Problem} error=${error} />
    <p class="sr-only" role="status" aria-live="polite">${said}</p>
    ${admin && html`<p class="everyone"><label><input type="checkbox" id="vms-everyone" checked=${everyone}
      onChange=${(e) => setEveryone(e.target.checked)} aria-describedby="vms-everyone-hint" /> ${t('vm_everyone')}</label>
      <span class="hint" id="vms-everyone-hint">${t('vm_everyoneHint')}</span></p>`}
    ${vms && vms.length === 0 && html`<p class="notice">${t('noVMs')}</p>`}
    <ul class="vms" aria-busy=${vms === null}>
      ${(vms || []).map((item) => {
        const vm = shown(item);
        return html`<${VMCard} key=${vm.id} vm=${vm} prof=${profiles[vm.profile]} now=${now} mine=${vm.owner === me}
          panel=${panels[vm.id]} cred=${creds[vm.id]} onCopy=${copied}
          onAct=${(a) => (a === 'extend' ? setExtending(vm) : setConfirm({vm, action: a}))}
          onDesktop=${() => desktop(vm)} onConsole=${() => (accessOf(vm).console === 'spice' ? desktop(vm, 'spice') : browserConsole(vm))}
          onHide=${() => setCreds((m) => ({...m, [vm.id]: {hidden: true}}))} />`;
      })}
    </ul>
    ${confirm && html`<${Confirm} text=${confirmText(confirm)} danger=${confirm.action === 'delete'}
      yes=${confirm.action === 'password' ? t('vm_confirmPasswordYes') : t('confirm', {action: actionWord(confirm.action).toLowerCase()})}
      onYes=${() => act(confirm.vm, confirm.action)} onNo=${() => setConfirm(null)} />`}
    ${extending && html`<${ExtendDialog} vm=${extending} prof=${profiles[extending.profile]} now=${now}
      onDone=${(after, hours) => extended(extending, after, hours)} onCancel=${() => setExtending(null)} />`}
  </main>`;
}

// parseRDP reads the full address and user name of an .rdp file.
function parseRDP(text) {
  const out = {text};
  for (const line of text.split(/\r?\n/)) {
    const m = /^(full address|username):s:(.*)$/.exec(line);
    if (m && m[1] === 'full address') {
      out.address = m[2];
      out.port = m[2].slice(m[2].lastIndexOf(':') + 1);
    } else if (m) out.user = m[2];
  }
  return out;
}

function Copy({text, what, onCopy}) {
  return html`<button type="button" class="quiet copy" onClick=${() => onCopy(text, what)}>${t('vm_copy')}<span class="sr-only"> ${what}</span></button>`;
}

// Command is a command line to type, with its copy button.
function Command({cmd, onCopy}) {
  return html`<div class="cmd"><code>${cmd}</code><${Copy} text=${cmd} what=${cmd} onCopy=${onCopy} /></div>`;
}

function VMCard({vm, prof, now, mine, panel, cred, onAct, onDesktop, onConsole, onCopy, onHide}) {
  const id = 'vm-' + vm.name;
  const gpus = (vm.gpus || []).map((g) => gpuHeld(g, prof) + (g.license ? ' · ' + t('vm_' + g.license) : ''));
  const addrs = (vm.addresses || []).map((a) => a.ip);
  const busy = ['allocating', 'creating', 'stopping', 'deleting'].includes(vm.state);
  const running = vm.state === 'running';
  // Exactly what the VM offers: its desktop, its console (when it is not
  // the desktop), SSH, its password (once, to its owner only).
  const acc = accessOf(vm);
  const proto = acc.desktop;
  const onDisplay = proto === 'vnc' || proto === 'spice';
  const canDesktop = running && (onDisplay ? !!vm.console : !!proto);
  const canConsole = running && !onDisplay && !!acc.console && !!vm.console;
  const canPassword = running && mine && acc.password && !cred;
  const left = vm.lease_end && leaseLeft(vm.lease_end, now);
  const est = estimate(vm, now);
  return html`<li class="card vm" id=${id} data-state=${vm.state} aria-labelledby=${id + '-name'}>
    <div class="vm-head">
      <h2 id=${id + '-name'}>${vm.name}</h2>
      <span class=${'state s-' + vm.state} data-testid="state">${stateWord(vm.state)}${vm.phase ? ' · ' + phaseWord(vm.phase) : ''}</span>
    </div>
    ${running && (vm.reason || '').startsWith(virtiofsDied) && html`<p class="notice error" role="alert" data-testid="virtiofs">${t('vm_virtiofsDied')}</p>`}
    ${vm.away_from_home && html`<p class="notice" data-testid="away-from-home">${t('vm_awayFromHome', {host: vm.host, owner: vm.owner, home: vm.home_host})}</p>`}
    ${(vm.driver_changes || []).map((dc) => html`<${DriverChange} key=${dc.id} vm=${vm} dc=${dc} />`)}
    ${vm.reason && html`<p class="reason">${vm.reason}${vm.queue_position ? ' (' + t('queuePos', {n: vm.queue_position}) + ')' : ''}</p>`}
    ${est && html`<p class="estimate" id=${id + '-estimate'}>${est.text}${est.uncertain && html` <span class="uncertain">${est.uncertain}</span>`}${est.stale && html` <span class="stale">${t('vm_estimateUpdating')}</span>`}</p>`}
    <dl class="facts">
      ${!mine && html`<div><dt>${t('vm_owner')}</dt><dd class="owner">${vm.owner}</dd></div>`}
      <div><dt>${t('profile')}</dt><dd>${vm.profile}</dd></div>
      <div><dt>${t('gpu')}</dt><dd class="gpus">${gpus.length ? gpus.map((g) => html`<span>${g}</span>`) : t('none')}</dd></div>
      <div><dt>${t('leaseEnd')}</dt><dd>${vm.lease_end
        ? html`<time datetime=${vm.lease_end}>${fmtTime(vm.lease_end)}</time>
          <span class=${'countdown' + (left.warn ? ' warn' : '')} id=${id + '-left'}>${left.text}${left.warn && vm.lease_end && new Date(vm.lease_end) > now
            ? html` <strong class="soon">${t('vm_endsSoon')}</strong>` : ''}</span>`
        : vm.hours ? t('vm_leaseHours', {h: vm.hours}) : t('none')}</dd></div>
      <div><dt>${t('addresses')}</dt><dd>${addrs.length
        ? html`<ul class="addrs">${addrs.map((ip) => html`<li><code>${ip}</code> <${Copy} text=${ip} what=${ip} onCopy=${onCopy} /></li>`)}</ul>`
        : t('none')}</dd></div>
      ${running && acc.ssh && html`<div><dt>${t('vm_ssh')}</dt><dd class="ssh"><${Command} cmd=${'gpuvm ssh ' + vm.name} onCopy=${onCopy} /></dd></div>`}
    </dl>
    ${vm.capabilities && vm.state !== 'stopped' && html`<${Capabilities} id=${id + '-caps'} caps=${vm.capabilities} />`}
    <div class="buttons" role="group" aria-label=${t('actions', {name: vm.name})}>
      ${canDesktop && html`<button type="button" onClick=${onDesktop} aria-expanded=${proto === 'vnc' ? undefined : !!panel}>${t('openDesktop')}</button>`}
      ${canConsole && html`<button type="button" class="quiet" onClick=${onConsole}>${t('vm_openConsole')}</button>`}
      ${['queued', 'running', 'stopped'].includes(vm.state) && html`<button type="button" class="quiet" onClick=${() => onAct('extend')}>${t('vm_extend')}</button>`}
      ${running && html`<button type="button" class="quiet" onClick=${() => onAct('reboot')}>${t('vm_reboot')}</button>`}
      ${running && html`<button type="button" class="quiet" onClick=${() => onAct('stop')}>${t('stop')}</button>`}
      ${vm.state === 'stopped' && html`<button type="button" onClick=${() => onAct('start')}>${t('start')}</button>`}
      ${canPassword && html`<button type="button" class="quiet" onClick=${() => onAct('password')}>${t('vm_showPassword')}</button>`}
      ${!busy && html`<button type="button" class="danger" onClick=${() => onAct('delete')}>${t('delete')}</button>`}
    </div>
    ${panel && html`<${DesktopPanel} vm=${vm} panel=${panel} onCopy=${onCopy} onConsole=${onConsole} />`}
    ${cred && cred.password && html`<section class="secret" id=${id + '-password'} aria-labelledby=${id + '-pw-title'}>
      <h3 id=${id + '-pw-title'}>${t('vm_passwordTitle', {name: vm.name})}</h3>
      <p class="warn-text">${t('vm_passwordWarn')}</p>
      <dl class="facts">
        <div><dt>${t('vm_user')}</dt><dd><code>${cred.user}</code> <${Copy} text=${cred.user} what=${t('vm_user')} onCopy=${onCopy} /></dd></div>
        <div><dt>${t('vm_password')}</dt><dd><code class="pw">${cred.password}</code> <${Copy} text=${cred.password} what=${t('vm_password')} onCopy=${onCopy} /></dd></div>
      </dl>
      <button type="button" class="quiet" onClick=${onHide}>${t('vm_hide')}</button>
    </section>`}
    ${cred && cred.error && html`<p class="notice error" role="alert" id=${id + '-password'}>${cred.error}</p>`}
  </li>`;
}

// DriverChange says an announced change of the hosts' vGPU manager that
// concerns the VM (driver_changes of GET /v1/vms/{id}): when, to which
// driver, and the snapshot of its disk offered first, taken here with the
// label the server gives.
function DriverChange({vm, dc}) {
  const [state, setState] = useState(null); // null, 'taking', {done: true} or {error}
  const words = {driver: dc.driver, at: fmtTime(dc.at), name: vm.name, note: dc.note ? ' (' + dc.note + ')' : '', label: dc.snapshot_label};
  const take = async () => {
    setState('taking');
    try { await api.takeSnapshot(vm.id, dc.snapshot_label); setState({done: true}); } catch (err) { setState({error: err.message}); }
  };
  return html`<div class="notice" data-testid="driver-change" id=${'vm-' + vm.name + '-driver-' + dc.id}>
    <p>${t('vm_driverChange', words)}</p>
    ${!dc.snapshot_label ? html`<p>${t('vm_driverNoSnap')}</p>`
      : state && state.done ? html`<p role="status" class="taken">${t('vm_driverSnapTaken', words)}</p>`
      : html`<p>${t('vm_driverSnapOffer', words)} <button type="button" class="quiet" disabled=${state === 'taking'} onClick=${take}>${t('vm_driverSnap')}</button></p>`}
    ${state && state.error && html`<p class="field-error" role="alert">${state.error}</p>`}
  </div>`;
}

// capRows are the capabilities of GET /v1/vms/{id}, in the order shown.
const capRows = [['disk_snapshot', 'vm_capDisk'], ['memory_snapshot', 'vm_capMemory'], ['suspend', 'vm_capSuspend'], ['live_migration', 'vm_capMigrate']];

// Capabilities says what the VM's state allows — disk and RAM snapshots,
// suspend, live migration — each yes or no with the server's reason (in
// the page's language), and what the answers rest on.
function Capabilities({id, caps}) {
  return html`<details class="caps" id=${id}>
    <summary>${t('vm_caps')}</summary>
    <dl class="facts">${capRows.map(([key, word]) => {
      const c = caps[key] || {};
      return html`<div data-cap=${key}><dt>${t(word)}</dt><dd><strong class=${c.can ? 'can' : 'cannot'}>${t(c.can ? 'vm_capYes' : 'vm_capNo')}</strong> <span class="why">${c.reason}</span></dd></div>`;
    })}</dl>
    ${caps.basis && html`<p class="basis">${t('vm_capBasis', {basis: caps.basis})}</p>`}
  </details>`;
}

// DesktopPanel says how to reach a desktop that is not the browser
// console: a file to download, a command to copy, links.
function DesktopPanel({vm, panel, onCopy, onConsole}) {
  const id = 'vm-' + vm.name + '-desktop';
  const d = (panel.con && panel.con.desktop) || {};
  const portOf = (use, def) => ((d.ports || []).find((p) => p.use === use) || {port: def}).port;
  const path = '/v1/vms/' + encodeURIComponent(vm.id);
  let body;
  switch (panel.proto) {
    case 'rdp': {
      const port = (panel.rdp && panel.rdp.port) || '3389';
      body = html`<p>${t('vm_rdpHow', {port})}</p>
        <${Command} cmd=${'gpuvm rdp ' + vm.name} onCopy=${onCopy} />
        <p>${t('vm_rdpFile', {port, user: (panel.rdp && panel.rdp.user) || '—'})}</p>
        <${Command} cmd=${`gpuvm tunnel ${vm.name} ${port} --local-port ${port}`} onCopy=${onCopy} />
        <p><a class="download" href=${path + '/desktop.rdp'} download=${vm.name + '.rdp'} id=${id + '-rdp'}>${t('vm_rdpDownload', {name: vm.name})}</a></p>`;
      break;
    }
    case 'spice':
      body = html`<p>${t('vm_spiceHow')}</p>
        <p><a class="download" href=${path + '/console.vv'} download=${vm.name + '.vv'} id=${id + '-vv'}>${t('vm_vvDownload', {name: vm.name})}</a></p>`;
      break;
    case 'sunshine':
      body = html`<p>${t('vm_sunshineHow')}</p>
        <${Command} cmd=${'gpuvm desktop ' + vm.name} onCopy=${onCopy} />
        <p>${t('vm_sunshineHost', {host: (d.local_host || '127.0.0.1') + ':' + portOf('http', 47989), name: vm.name})}</p>
        ${d.web_url && html`<p><a href=${d.web_url} target="_blank" rel="noopener noreferrer">${t('vm_sunshineWeb')}</a></p>`}`;
      break;
    case 'dcv':
      body = html`<p>${t('vm_dcvHow', {port: portOf('dcv', 8443)})}</p>
        <${Command} cmd=${'gpuvm desktop ' + vm.name} onCopy=${onCopy} />
        <p class="links">${d.web_url && html`<a href=${d.web_url} target="_blank" rel="noopener noreferrer">${t('vm_dcvWeb')}</a>`}
          ${d.link && html`<a href=${d.link}>${t('vm_dcvLink')}</a>`}</p>`;
      break;
    default:
      body = html`<p>${t('vm_noneHow')}</p><${Command} cmd=${'gpuvm ssh ' + vm.name} onCopy=${onCopy} />`;
  }
  return html`<section class="desktop" id=${id} aria-labelledby=${id + '-title'} data-protocol=${panel.proto}>
    <h3 id=${id + '-title'}>${t('vm_desktopTitle', {name: vm.name})}</h3>
    ${panel.error ? html`<p class="notice error" role="alert">${t('error', {msg: panel.error})}</p>` : body}
    ${vm.console && vm.console.protocol === 'vnc' && panel.proto !== 'vnc' && html`<p><button type="button" class="quiet" onClick=${onConsole}>${t('vm_console')}</button></p>`}
  </section>`;
}

// ExtendDialog asks how many hours to add to a VM's lease, within its
// profile's maximum, and shows the API's refusal in words.
function ExtendDialog({vm, prof, now, onDone, onCancel}) {
  const ref = useRef(null);
  const max = prof ? hoursOf(prof.lease && prof.lease.max) : 0;
  const room = max ? Math.max(0, max - vm.hours) : null;
  const [hours, setHours] = useState('1');
  const [problem, setProblem] = useState('');
  const [sending, setSending] = useState(false);
  useEffect(() => { const d = ref.current; d.showModal(); return () => d.open && d.close(); }, []);
  const whole = (v) => v !== '' && Number.isInteger(Number(v)) && Number(v) >= 1;
  const newEnd = vm.lease_end && whole(hours) ? new Date(new Date(vm.lease_end).getTime() + Number(hours) * 3600000).toISOString() : '';
  const submit = async (e) => {
    e.preventDefault();
    const v = e.target.elements.hours.value.trim();
    setHours(v);
    if (!whole(v)) { setProblem(t('vm_extendWhole')); return; }
    const n = Number(v);
    setSending(true);
    setProblem('');
    try {
      onDone(await api.extendVM(vm.id, n), n);
    } catch (err) {
      setProblem(err.message);
      setSending(false);
    }
  };
  const title = 'extend-title';
  return html`<dialog ref=${ref} class="confirm extend" id="extend-dialog" aria-labelledby=${title} onCancel=${onCancel}>
    <h2 id=${title}>${t('vm_extendTitle', {name: vm.name})}</h2>
    ${room === 0 ? html`<p>${t('vm_extendFull', {name: vm.name, h: vm.hours})}</p>
      <div class="buttons"><button type="button" class="quiet" onClick=${onCancel} autofocus>${t('vm_close')}</button></div>`
    : html`<form onSubmit=${submit} noValidate>
      <label for="extend-hours">${t('vm_extendHours')}</label>
      <input id="extend-hours" name="hours" type="number" inputmode="numeric" min="1" max=${room || undefined} step="1" value=${hours}
        aria-describedby="extend-hint" onInput=${(e) => setHours(e.target.value)} autofocus />
      <p class="hint" id="extend-hint">${room ? t('vm_extendHint', {room, max, name: vm.name, h: vm.hours}) : t('vm_extendHintNoMax', {name: vm.name, h: vm.hours})}
        ${' '}${newEnd ? t('vm_extendNewEnd', {at: clock(newEnd, now)}) : vm.state === 'queued' ? t('vm_extendQueued') : ''}</p>
      ${problem && html`<p class="notice error" role="alert" id="extend-problem">${problem}</p>`}
      <div class="buttons">
        <button type="submit" id="extend-yes" disabled=${sending}>${sending ? t('vm_extending') : t('vm_extendYes')}</button>
        <button type="button" class="quiet" onClick=${onCancel}>${t('cancel')}</button>
      </div>
    </form>`}
  </dialog>`;
}

const confirmText = ({vm, action}) => t({stop: 'confirmStop', start: 'confirmStart', delete: 'confirmDelete',
  reboot: 'vm_confirmReboot', password: 'vm_confirmPassword'}[action], {name: vm.name});
