// i18n.js: the portal's words in English and Simplified Chinese, and the
// formatting of times (the viewer's time zone), sizes and GPUs.

export const lang = document.documentElement.lang === 'zh-CN' ? 'zh-CN' : 'en';

const words = {
  en: {
    brand: 'gpuvm', nav: 'Main', catalogue: 'GPU machines', vms: 'My VMs', signOut: 'Sign out',
    nav_catalogue: 'GPU machines', nav_vms: 'My VMs', nav_storage: 'My storage', nav_tasks: 'Tasks', nav_book: 'Book ahead', nav_usage: 'My usage', nav_rules: 'The rules',
    nav_fleet: 'Fleet', nav_admin: 'Admin',
    language: 'Language', signedInAs: 'Signed in as {user}',
    simulated: 'Simulated GPU server', simulatedHint: 'no real GPU is used on {hosts}: its GPUs, capacity and figures come from the simulator',
    simulatedHintAny: 'this server uses no real GPU: its GPUs, capacity and figures come from the simulator',
    loginTitle: 'Sign in to gpuvm', token: 'API token',
    tokenHint: 'Paste the token your admin gave you, or one you made with "gpuvm admin tokens create YOUR-NAME". It is exchanged for a session and not kept by this page.',
    signIn: 'Sign in', signingIn: 'Signing in…',
    catalogueIntro: 'The machines you may ask for. Each card says what it has and how many are free now.',
    vcpus: 'vCPUs', memory: 'Memory', disk: 'Disk', lease: 'Lease', leaseHours: '{d} h by default, {m} h at most',
    leaseDefault: '{d} h by default', available: 'Free now',
    free: '{n} free', freeOf: '{n} free of {t} GPUs', freeOfN: '{n} free of {t}', noneFree: 'none free', unknownFree: 'not known yet (no server has reported)',
    freeOfKinds: '{n} free of {t}: {kinds}', asMIG: '{n} as MIG slices', asVGPU: '{n} as vGPUs', asWhole: '{n} as whole GPUs',
    noGPU: 'no GPU', noGPUNeeded: 'always (no GPU needed)', mig: 'MIG {p} slice of {m}', migAny: 'MIG {p} slice of a GPU', vgpu: '{t} vGPU',
    whole: 'whole {m}', wholeN: '{n} × whole {m}', wholeAny: 'a whole GPU', anyGPU: 'a GPU share of at least {mem}',
    ask: 'Ask for a VM', askTitle: 'Ask for a {p} VM', name: 'Name', nameHint: 'Lower-case letters, digits and dashes; empty: one is made up.',
    hours: 'Hours', hoursHint: 'From 1 to {m}.', sshKeys: 'SSH public keys', sshHint: 'One per line (optional).',
    submit: 'Ask', cancel: 'Cancel', asking: 'Asking…', asked: '{name} is asked for: see My VMs.',
    noProfiles: 'There is no machine you may ask for. Ask your admin{admin}.',
    vmsIntro: 'Your VMs, updated live.', noVMs: 'You have no VMs. Ask for one in GPU machines.',
    live: 'Live', offline: 'Reconnecting…',
    state: 'State', profile: 'Profile', gpu: 'GPU', leaseEnd: 'Lease ends', addresses: 'Addresses',
    queuePos: 'number {n} in the queue', none: '—',
    stop: 'Stop', start: 'Start', delete: 'Delete', openDesktop: 'Open desktop', actions: 'Actions for {name}',
    confirmStop: 'Stop {name}? Its guest is shut down; its GPU is given back.',
    confirmStart: 'Start {name}? It queues for a GPU again.',
    confirmDelete: 'Delete {name}? Its disk is removed; this cannot be undone.',
    confirm: 'Yes, {action}', done: '{action}: asked for {name}.',
    in: 'in {d}', ago: '{d} ago', error: 'Something went wrong: {msg}',
    states: {queued: 'queued', allocating: 'allocating', creating: 'creating', running: 'running', stopping: 'stopping',
      stopped: 'stopped', deleting: 'deleting', deleted: 'deleted', failed: 'failed'},
    // A VM's phase (api.Phase*): a code, said here.
    phases: {'booting': 'booting', 'ready': 'ready', 'waiting for a GPU': 'waiting for a GPU',
      'waiting for its start time': 'waiting for its start time', 'allocating GPU': 'allocating GPU',
      'preparing disk': 'preparing disk', 'shutting down': 'shutting down', 'starting': 'starting', 'removing domain': 'removing domain'},
  },
  'zh-CN': {
    brand: 'gpuvm', nav: '主导航', catalogue: 'GPU 机器', vms: '我的虚拟机', signOut: '退出登录',
    nav_catalogue: 'GPU 机器', nav_vms: '我的虚拟机', nav_storage: '我的存储', nav_tasks: '任务', nav_book: '预约', nav_usage: '我的用量', nav_rules: '使用规则',
    nav_fleet: '机群', nav_admin: '管理',
    language: '语言', signedInAs: '已登录：{user}',
    simulated: '模拟 GPU 服务器', simulatedHint: '{hosts} 没有使用真实 GPU：其 GPU、容量和各项数据都来自模拟器',
    simulatedHintAny: '此服务器没有使用真实 GPU：其 GPU、容量和各项数据都来自模拟器',
    loginTitle: '登录 gpuvm', token: 'API 令牌',
    tokenHint: '粘贴管理员给你的令牌，或用 "gpuvm admin tokens create 你的用户名" 生成的令牌。它只用来换取会话，本页不会保存它。',
    signIn: '登录', signingIn: '正在登录…',
    catalogueIntro: '你可以申请的机器。每张卡片写明配置和当前空闲数量。',
    vcpus: '虚拟 CPU', memory: '内存', disk: '磁盘', lease: '租期', leaseHours: '默认 {d} 小时，最长 {m} 小时',
    leaseDefault: '默认 {d} 小时', available: '当前空闲',
    free: '空闲 {n} 个', freeOf: '空闲 {n} 块，共 {t} 块 GPU', freeOfN: '空闲 {n} 个，共 {t} 个', noneFree: '没有空闲', unknownFree: '暂不清楚（还没有服务器报告）',
    freeOfKinds: '空闲 {n} 个，共 {t} 个：{kinds}', asMIG: 'MIG 切片 {n} 个', asVGPU: '虚拟 GPU {n} 个', asWhole: '整块 GPU {n} 块',
    noGPU: '无 GPU', noGPUNeeded: '随时可用（无需 GPU）', mig: '{m} 的 MIG {p} 切片', migAny: 'GPU 的 MIG {p} 切片', vgpu: '{t} 虚拟 GPU',
    whole: '整块 {m}', wholeN: '{n} 块整块 {m}', wholeAny: '一整块 GPU', anyGPU: '至少 {mem} 的 GPU 份额',
    ask: '申请虚拟机', askTitle: '申请 {p} 虚拟机', name: '名称', nameHint: '小写字母、数字和连字符；留空则自动生成。',
    hours: '小时数', hoursHint: '1 到 {m}。', sshKeys: 'SSH 公钥', sshHint: '每行一个（可选）。',
    submit: '申请', cancel: '取消', asking: '正在申请…', asked: '已申请 {name}：见“我的虚拟机”。',
    noProfiles: '没有你可以申请的机器。请联系管理员{admin}。',
    vmsIntro: '你的虚拟机，实时更新。', noVMs: '你还没有虚拟机。可以在“GPU 机器”中申请。',
    live: '实时', offline: '正在重新连接…',
    state: '状态', profile: '配置', gpu: 'GPU', leaseEnd: '租期结束', addresses: '地址',
    queuePos: '排队第 {n} 位', none: '—',
    stop: '停止', start: '启动', delete: '删除', openDesktop: '打开桌面', actions: '{name} 的操作',
    confirmStop: '停止 {name}？客户机将关机，GPU 将归还。',
    confirmStart: '启动 {name}？它会重新排队等待 GPU。',
    confirmDelete: '删除 {name}？其磁盘将被删除，且无法撤销。',
    confirm: '确定{action}', done: '已请求{action} {name}。',
    in: '{d}后', ago: '{d}前', error: '出错了：{msg}',
    states: {queued: '排队中', allocating: '分配中', creating: '创建中', running: '运行中', stopping: '停止中',
      stopped: '已停止', deleting: '删除中', deleted: '已删除', failed: '失败'},
    phases: {'booting': '正在启动客户机', 'ready': '就绪', 'waiting for a GPU': '等待 GPU',
      'waiting for its start time': '等待开始时间', 'allocating GPU': '正在分配 GPU',
      'preparing disk': '正在准备磁盘', 'shutting down': '正在关机', 'starting': '正在启动', 'removing domain': '正在移除虚拟机定义'},
  },
};

// addWords adds a page's own words ({en: {...}, 'zh-CN': {...}}) to the
// table: each page module calls it once, when it is loaded, so that a
// page's words live beside it.
export function addWords(table) {
  for (const l of Object.keys(table)) Object.assign(words[l] || (words[l] = {}), table[l]);
}

// t is the text of key, with {name}s filled from vars.
export function t(key, vars = {}) {
  const s = words[lang][key] ?? words.en[key] ?? key;
  return typeof s === 'string' ? s.replace(/\{(\w+)\}/g, (_, k) => String(vars[k] ?? (k === 'admin' ? adminContact() : ''))) : s;
}

// contact is whom to ask about this server (server.contact, from GET
// /v1/session or /v1/auth/methods): the words "ask your admin" name it,
// "ask your admin (Lab IT <gpu-help@example.org>)", through {admin}; "" for
// nobody in particular, and the words read as before.
let contact = '';
export function setContact(c) { contact = c || ''; }
const adminContact = () => (!contact ? '' : lang === 'en' ? ` (${contact})` : `（${contact}）`);

export const stateWord = (s) => t('states')[s] || s;
export const phaseWord = (p) => t('phases')[p] || p;

// sentences joins sentences as the page's language writes them: a space
// between English ones, none after Chinese ones (their full stop "。"
// has its room); a sentence that is not there ('', false) is left out.
export const sentences = (...s) => s.filter(Boolean).join(lang === 'en' ? ' ' : '');

// gap is what stands after a sentence before what follows it in the page
// (a command, a name): a space in English, none after Chinese punctuation.
export const gap = () => (lang === 'en' ? ' ' : '');

// setLanguage remembers the visitor's choice (a cookie the server reads to
// render the page in it) and reloads.
export function setLanguage(l) {
  document.cookie = `gpuvm_lang=${l}; path=/; max-age=31536000; samesite=strict`;
  location.reload();
}

const dateTime = new Intl.DateTimeFormat(lang, {dateStyle: 'medium', timeStyle: 'short'});
export const fmtTime = (iso) => dateTime.format(new Date(iso));

// fmtRelative: "in 3 h 20 min", "5 min ago".
export function fmtRelative(iso, now = Date.now()) {
  const ms = new Date(iso).getTime() - now;
  const mins = Math.round(Math.abs(ms) / 60000);
  const h = Math.floor(mins / 60), m = mins % 60;
  const unit = lang === 'zh-CN' ? [' 小时', ' 分钟'] : [' h', ' min'];
  const d = (h ? h + unit[0] + (m ? ' ' : '') : '') + (m || !h ? m + unit[1] : '');
  return t(ms >= 0 ? 'in' : 'ago', {d});
}

export function fmtBytes(n) {
  const gib = n / (1 << 30);
  if (gib >= 1) return (Number.isInteger(gib) ? gib : gib.toFixed(1)) + ' GiB';
  return Math.round(n / (1 << 20)) + ' MiB';
}

// hoursOf a duration in seconds (how the API writes a profile's lease).
export const hoursOf = (secs) => Math.round((secs || 0) / 3600);

const article = (m) => (lang === 'en' ? (/^[AEFHILMNORSX8]/.test(m) ? 'an ' : 'a ') + m : m);

// gpuWords says what GPU a profile gives, in words people use.
export function gpuWords(g) {
  if (!g) return t('noGPU');
  switch (g.kind) {
    case 'mig': return g.model ? t('mig', {p: g.profile, m: article(g.model)}) : t('migAny', {p: g.profile});
    case 'vgpu': return t('vgpu', {t: g.type});
    case 'passthrough':
      if (!g.model) return t('wholeAny');
      return g.count > 1 ? t('wholeN', {n: g.count, m: g.model}) : t('whole', {m: g.model});
    default: return t('anyGPU', {mem: fmtBytes(g.memory || 0)});
  }
}

// kindWords are the kinds of GPU a free count is split into, in words.
const kindWords = [['mig', 'asMIG'], ['vgpu', 'asVGPU'], ['passthrough', 'asWhole']];

// freeWords says how many VMs of a profile's GPU the hosts could place now:
// as the server counted them by the placers (pf, the profile's `free`),
// in the words of the kinds they would get; else, from a server that does
// not count them, from the hosts' free capacity.
export function freeWords(g, hosts, pf) {
  const up = (hosts || []).filter((h) => h.state === 'up');
  if (!up.length) return {text: t('unknownFree'), n: -1};
  if (!g) return {text: t('noGPUNeeded'), n: 1};
  if (pf) {
    const n = pf.vms || 0, total = pf.total || 0;
    if (n === 0) return {text: t('noneFree'), n};
    const by = pf.by_kind || {};
    const kinds = kindWords.filter(([k]) => by[k] > 0);
    if (kinds.length > 1) return {text: t('freeOfKinds', {n, t: total, kinds: kinds.map(([k, w]) => t(w, {n: by[k]})).join(lang === 'en' ? ', ' : '，')}), n};
    const of = kinds.length === 1 && kinds[0][0] === 'passthrough' ? 'freeOf' : 'freeOfN';
    return {text: total ? t(of, {n, t: total}) : t('free', {n}), n};
  }
  let n = 0, total = 0;
  for (const h of up) {
    const f = h.free || {};
    const all = h.total || {};
    if (g.kind === 'mig') { n += (f.mig || {})[g.profile] || 0; total += (all.mig || {})[g.profile] || 0; }
    else if (g.kind === 'vgpu') { n += (f.vgpu || {})[g.type] || 0; total += (all.vgpu || {})[g.type] || 0; }
    else { n += Math.floor((f.idle_gpus || 0) / Math.max(g.count || 1, 1)); total += Math.floor(((h.gpus || 0) - (h.drained_gpus || 0)) / Math.max(g.count || 1, 1)); }
  }
  if (n === 0) return {text: t('noneFree'), n};
  const of = g.kind === 'mig' || g.kind === 'vgpu' ? 'freeOfN' : 'freeOf';
  return {text: total ? t(of, {n, t: total}) : t('free', {n}), n};
}
