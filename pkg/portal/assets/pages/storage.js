// pages/storage.js: /storage, "My storage": the caller's home (where the
// guest mounts it, the node it lives on, used against its quota and how
// the quota holds), the shares they may mount (GET /v1/shares), their
// data disks with the disk quota (create, grow, attach, detach, delete:
// /v1/volumes), and their VMs' disk snapshots (take, restore, delete:
// /v1/vms/{id}/snapshots).
// Every refusal is shown in the server's words beside the field its
// problem names; the page reads everything again after each action and on
// any event of the caller's VMs.
import {html, useState, useEffect, useCallback, useRef} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t, addWords, lang, sentences, gap, stateWord, fmtTime, fmtBytes} from '../i18n.js';
import {Header, Problem, Confirm, useEvents} from '../ui.js';

addWords({
  en: {
    st_title: 'My storage',
    st_intro: 'What you keep beyond a VM: your home, the shares you may mount, your data disks, and your VMs\' snapshots.',
    st_home: 'Home', st_homeAt: 'In each of your VMs whose profile has a home, it is mounted at {mount}: the same files in every VM.',
    st_homeHost: 'It lives on the node {host}: your VMs that mount it are placed on that node when it can run them.',
    st_noHome: 'This server keeps no homes: what you keep lives on each VM\'s own disk, or on a data disk.',
    st_used: '{used} of {quota} used ({pct})', st_usedNoQuota: '{used} used (no quota)',
    st_usedSR: 'Your home uses {used} of its {quota} quota, {pct}.',
    st_notMeasured: 'Not measured yet: the server measures homes every few minutes.',
    st_enforced: 'The quota is enforced: the file system refuses writes past it.',
    st_notEnforced: 'The quota is not enforced on this server: your home is measured every few minutes and you are warned at 90%, but writes past it are not refused.',
    st_serverWords: 'The server\'s words (for your admin)',
    st_homeDelete: 'Delete my home',
    st_homeDeleteTitle: 'Delete your home?',
    st_homeLoseAll: 'Every file and folder in your home is deleted, for good: nothing can bring it back.',
    st_homeEveryVM: 'Your home is the same one in all your VMs: it is gone from every one of them at once.',
    st_homeNothingElse: 'Nothing else is deleted: your VMs, their system disks and snapshots, your data disks and the shares stay as they are.',
    st_homeStopFirst: 'A VM of yours that mounts your home must be stopped first.',
    st_homeType: 'Type your user name, {user}, to confirm',
    st_homeDeleteYes: 'Delete my home',
    st_homeDeleted: 'Your home is deleted.',
    st_homeNone: 'You have no home now (none was made yet, or it was deleted). A new, empty one is made the next time a VM of yours that has a home is created or started.',
    st_shares: 'Shares', st_sharesIntro: 'Folders of this server your admin declared, which your VMs may mount.',
    st_noShares: 'There is no share you may mount.',
    st_rw: 'read-write', st_ro: 'read-only', st_mode: 'Access', st_mount: 'In the guest', st_rule: 'Given by',
    st_roEnforced: 'Read-only is enforced on the host: the share is served through a read-only bind mount, so nothing in the VM can write to it.',
    st_roNotEnforced: 'Read-only cannot be enforced on this host.',
    st_shareQuota: 'Quota {quota}, not measured yet.',
    st_shareNotEnforced: 'The share\'s quota is not enforced on this server: it is measured every few minutes, but writes past it are not refused.',
    st_unavailable: 'Not available on this host now: a VM with it does not start. Ask your admin{admin}.',
    st_askShare: 'To have a share in a VM, ask for the VM with it; the share is mounted when the VM starts:',
    st_askShareForm: 'The ask form in GPU machines offers them as checkboxes too; a profile may also mount shares of its own always.',
    st_disks: 'Data disks',
    st_disksIntro: 'Block volumes of your own, attached to one VM at a time: plugged in at once when it runs, there at its next start when it is stopped or queued. Deleting a VM keeps its disks.',
    st_diskQuota: 'Your disks hold {used} of {quota} ({pct}); the limit is set by {rule}.', st_diskQuotaSR: 'Your data disks hold {used} of {quota}, {pct}.',
    st_diskNoQuota: 'Your disks hold {used}; no rule bounds them.',
    st_noDisks: 'You have no data disks.',
    st_name: 'Name', st_size: 'Size', st_state: 'State', st_attached: 'Attached to', st_device: 'In the guest', st_detached: 'not attached',
    st_sizeHint: 'A binary unit: 512 MiB, 20 GiB, 1 TiB.', st_nameHint: 'Lower-case letters, digits and dashes, starting with a letter.',
    st_create: 'Create a data disk', st_createYes: 'Create', st_created: 'Data disk {name} is made.',
    st_grow: 'Grow', st_growTo: 'New size of {name}', st_growYes: 'Grow', st_grown: '{name} is now {size}. Grow its file system inside the guest (resize2fs).',
    st_attach: 'Attach', st_attachTo: 'VM to attach {name} to', st_attachYes: 'Attach', st_attachedTo: '{name} is attached to {vm}: it is there at the VM\'s next start.',
    st_plugged: '{name} is plugged into {vm}: the guest has a new disk, {dev}.', st_unplugged: '{name} is unplugged and detached.',
    st_plugging: 'Plugging {name} into {vm}…', st_unplugging: 'Unplugging {name}: waiting for the guest to let it go…',
    st_stillPlugging: 'Not finished after two minutes: see operation {op} (GET /v1/operations/{op}).',
    st_noVMs: 'You have no VM to attach it to.',
    st_vmOption: '{name} ({state})',
    st_detach: 'Detach', st_detachedFrom: '{name} is detached.',
    st_delete: 'Delete', st_confirmDeleteDisk: 'Delete data disk {name} and everything on it? This cannot be undone.',
    st_deleted: '{name} is deleted.', st_detachFirst: 'Detach it before deleting it.',
    st_diskStates: {creating: 'being made', ready: 'ready', deleting: 'being deleted', error: 'failed', detaching: 'being unplugged'},
    st_snaps: 'Snapshots',
    st_snapsIntro: 'A snapshot keeps a VM\'s system disk as it was (not its data disks, home or shares). Restoring one puts the disk back as it was; the VM must be stopped.',
    st_snapKeep: 'You may keep {n} snapshots in all, of all your VMs together (set by {rule}).',
    st_noSnaps: 'None of your VMs has a snapshot.',
    st_take: 'Take a snapshot', st_takeVM: 'VM', st_label: 'Label', st_labelHint: 'Optional: at most 64 characters.',
    st_takeYes: 'Take', st_taken: 'A snapshot of {vm} is being taken.', st_noSnapVMs: 'You have no running or stopped VM.',
    st_snapOf: 'Snapshots of {vm} ({state})', st_noLabel: '(no label)',
    st_consistency: 'Consistency', st_takenAt: 'Taken', st_expires: 'Expires', st_never: 'never', st_restoredAt: 'Last restored',
    st_quiesced: 'quiesced: the guest agent froze the file systems while it was taken',
    st_crash: 'crash-consistent: as after a power cut (no guest agent froze the file systems)',
    st_notYet: 'not taken yet',
    st_snapStates: {creating: 'being taken', ready: 'ready', restoring: 'restoring', deleting: 'being deleted', failed: 'failed'},
    st_restore: 'Restore', st_stopFirst: 'Stop {vm} first: a disk is restored only while its VM is stopped.',
    st_confirmRestore: 'Restore the disk of {vm} to the snapshot {label} taken {at}? What was written on it since is lost.',
    st_restoring: 'The disk of {vm} is being restored.',
    st_confirmDeleteSnap: 'Delete the snapshot {label} of {vm}? This cannot be undone.', st_snapDeleted: 'The snapshot {label} is being deleted.',
    st_snapsLoad: 'The snapshots of {vm} could not be read: {msg}',
  },
  'zh-CN': {
    st_title: '我的存储',
    st_intro: '虚拟机之外属于你的存储：你的主目录、你可以挂载的共享、你的数据盘，以及你的虚拟机的快照。',
    st_home: '主目录', st_homeAt: '在你的每台配置带有主目录的虚拟机中，它都挂载在 {mount}：每台虚拟机里都是同一批文件。',
    st_homeHost: '它位于节点 {host} 上：挂载它的虚拟机在该节点能运行时会被放置在那里。',
    st_noHome: '此服务器不提供主目录：你的文件保存在各虚拟机自己的磁盘上，或保存在数据盘上。',
    st_used: '已用 {used} / {quota}（{pct}）', st_usedNoQuota: '已用 {used}（无配额）',
    st_usedSR: '你的主目录已用 {used}，配额 {quota}，占 {pct}。',
    st_notMeasured: '尚未测量：服务器每隔几分钟测量一次主目录。',
    st_enforced: '配额强制执行：超出配额的写入会被文件系统拒绝。',
    st_notEnforced: '此服务器不强制执行配额：每隔几分钟测量一次你的主目录，用到 90% 时会提醒你，但超出配额的写入不会被拒绝。',
    st_serverWords: '服务器的原话（英文，供管理员参考）',
    st_homeDelete: '删除我的主目录',
    st_homeDeleteTitle: '删除你的主目录？',
    st_homeLoseAll: '主目录中的所有文件和文件夹都会被永久删除，无法恢复。',
    st_homeEveryVM: '你的所有虚拟机用的是同一个主目录：它会同时从每台虚拟机中消失。',
    st_homeNothingElse: '其他内容都不会被删除：你的虚拟机、它们的系统盘和快照、你的数据盘以及共享都保持不变。',
    st_homeStopFirst: '挂载你主目录的虚拟机须先停止。',
    st_homeType: '输入你的用户名 {user} 以确认',
    st_homeDeleteYes: '删除我的主目录',
    st_homeDeleted: '你的主目录已删除。',
    st_homeNone: '你现在没有主目录（尚未创建，或已被删除）。下次创建或启动一台带主目录的虚拟机时，会创建一个新的空主目录。',
    st_shares: '共享', st_sharesIntro: '管理员声明的本服务器上的文件夹，你的虚拟机可以挂载。',
    st_noShares: '没有你可以挂载的共享。',
    st_rw: '读写', st_ro: '只读', st_mode: '权限', st_mount: '客户机内路径', st_rule: '依据规则',
    st_roEnforced: '只读在宿主机上强制执行：共享通过只读绑定挂载提供，虚拟机内无法写入。',
    st_roNotEnforced: '此宿主机无法强制只读。',
    st_shareQuota: '配额 {quota}，尚未测量。',
    st_shareNotEnforced: '此服务器不强制执行该共享的配额：每隔几分钟测量一次，但超出配额的写入不会被拒绝。',
    st_unavailable: '此宿主机上目前不可用：带有它的虚拟机无法启动。请联系管理员{admin}。',
    st_askShare: '要在虚拟机中使用共享，申请虚拟机时带上它；虚拟机启动时会挂载该共享：',
    st_askShareForm: '“GPU 机器”中的申请表单也以复选框提供这些共享；配置本身也可以总是挂载某些共享。',
    st_disks: '数据盘',
    st_disksIntro: '属于你的块存储卷，每次挂接到一台虚拟机：运行中的虚拟机立即热插入，停止或排队的虚拟机在下次启动时生效。删除虚拟机时会保留其数据盘。',
    st_diskQuota: '你的数据盘共占 {used} / {quota}（{pct}）；上限由 {rule} 设定。', st_diskQuotaSR: '你的数据盘共占 {used} / {quota}，占 {pct}。',
    st_diskNoQuota: '你的数据盘共占 {used}；没有规则限制。',
    st_noDisks: '你还没有数据盘。',
    st_name: '名称', st_size: '大小', st_state: '状态', st_attached: '挂接到', st_device: '客户机内设备', st_detached: '未挂接',
    st_sizeHint: '使用二进制单位：512 MiB、20 GiB、1 TiB。', st_nameHint: '小写字母、数字和连字符，以字母开头。',
    st_create: '创建数据盘', st_createYes: '创建', st_created: '数据盘 {name} 已创建。',
    st_grow: '扩容', st_growTo: '{name} 的新大小', st_growYes: '扩容', st_grown: '{name} 现在为 {size}。请在客户机内扩展其文件系统（resize2fs）。',
    st_attach: '挂接', st_attachTo: '要挂接 {name} 的虚拟机', st_attachYes: '挂接', st_attachedTo: '{name} 已挂接到 {vm}：虚拟机下次启动时可用。',
    st_plugged: '{name} 已热插入 {vm}：客户机多了一块磁盘 {dev}。', st_unplugged: '{name} 已拔出并卸下。',
    st_plugging: '正在把 {name} 热插入 {vm}……', st_unplugging: '正在拔出 {name}：等待客户机释放它……',
    st_stillPlugging: '两分钟后仍未完成：请查看操作 {op}（GET /v1/operations/{op}）。',
    st_noVMs: '你没有可以挂接的虚拟机。',
    st_vmOption: '{name}（{state}）',
    st_detach: '卸下', st_detachedFrom: '{name} 已卸下。',
    st_delete: '删除', st_confirmDeleteDisk: '删除数据盘 {name} 及其中的所有数据？此操作无法撤销。',
    st_deleted: '{name} 已删除。', st_detachFirst: '请先卸下再删除。',
    st_diskStates: {creating: '创建中', ready: '就绪', deleting: '删除中', error: '失败', detaching: '拔出中'},
    st_snaps: '快照',
    st_snapsIntro: '快照保存虚拟机系统盘当时的状态（不含数据盘、主目录和共享）。恢复快照会把磁盘还原到当时的状态；虚拟机必须已停止。',
    st_snapKeep: '你的所有虚拟机合计最多可保留 {n} 个快照（由 {rule} 设定）。',
    st_noSnaps: '你的虚拟机都还没有快照。',
    st_take: '创建快照', st_takeVM: '虚拟机', st_label: '标签', st_labelHint: '可选：最多 64 个字符。',
    st_takeYes: '创建', st_taken: '正在为 {vm} 创建快照。', st_noSnapVMs: '你没有运行中或已停止的虚拟机。',
    st_snapOf: '{vm} 的快照（{state}）', st_noLabel: '（无标签）',
    st_consistency: '一致性', st_takenAt: '创建时间', st_expires: '过期时间', st_never: '永不', st_restoredAt: '上次恢复',
    st_quiesced: '静默一致：创建时客户机代理冻结了文件系统',
    st_crash: '崩溃一致：相当于突然断电后的状态（没有客户机代理冻结文件系统）',
    st_notYet: '尚未创建',
    st_snapStates: {creating: '创建中', ready: '就绪', restoring: '恢复中', deleting: '删除中', failed: '失败'},
    st_restore: '恢复', st_stopFirst: '请先停止 {vm}：只有虚拟机停止时才能恢复磁盘。',
    st_confirmRestore: '把 {vm} 的磁盘恢复到 {at} 创建的快照 {label}？此后写入的内容都会丢失。',
    st_restoring: '正在恢复 {vm} 的磁盘。',
    st_confirmDeleteSnap: '删除 {vm} 的快照 {label}？此操作无法撤销。', st_snapDeleted: '正在删除快照 {label}。',
    st_snapsLoad: '无法读取 {vm} 的快照：{msg}',
  },
});

const pctFmt = new Intl.NumberFormat(lang, {style: 'percent', maximumFractionDigits: 0});
const diskState = (s) => t('st_diskStates')[s] || s;
const snapState = (s) => t('st_snapStates')[s] || s;
const consistencyWords = (c) => (c === 'quiesced' ? t('st_quiesced') : c === 'crash-consistent' ? t('st_crash') : c || t('st_notYet'));
const labelOf = (s) => s.label || t('st_noLabel');
// transient: a snapshot or disk the server is still working on: the page
// reads again shortly.
const transient = (s) => ['creating', 'restoring', 'deleting'].includes(s);

// load reads everything the page shows: the volumes, the shares, the
// caller's VMs and each one's snapshots, and whether the caller's home
// exists (GET /v1/homes; null where it cannot be read: a server without
// homes).
async function load(me) {
  const [vols, shares, vms, homes] = await Promise.all([
    api.volumes(),
    api.shares().catch((error) => ({error})),
    api.allVMs(me),
    api.homes().catch(() => null),
  ]);
  const live = vms.filter((v) => v.state !== 'deleted' && v.owner === me);
  const snaps = {};
  await Promise.all(live.map(async (vm) => {
    try { snaps[vm.id] = await api.snapshots(vm.id); } catch (error) { snaps[vm.id] = {error}; }
  }));
  const home = homes && (homes.homes || []).find((h) => h.user === me);
  return {vols, shares, vms: live, snaps, home: home || null};
}

export default function Storage({session}) {
  const me = session.user.name;
  const [d, setD] = useState(null);
  const [error, setError] = useState(null);
  const [said, setSaid] = useState('');
  const [confirm, setConfirm] = useState(null);
  const [live, setLive] = useState(false);
  const reload = useCallback(() => load(me).then((x) => { setD(x); setError(null); }).catch(setError), [me]);
  useEffect(() => { reload(); }, [reload]);
  useEvents(['vm.created', 'vm.state', 'vm.action', 'volume.warning'], reload, setLive, setError);
  // A snapshot being taken, restored or deleted: read again until done.
  const busy = d && Object.values(d.snaps).some((l) => (l.snapshots || []).some((s) => transient(s.state)));
  useEffect(() => {
    if (!busy) return undefined;
    const id = setTimeout(reload, 1000);
    return () => clearTimeout(id);
  }, [d, busy, reload]);
  // act runs an action, says done, and reads the page again; a refusal is
  // the caller's to show (beside its field).
  const act = async (fn, done) => {
    const r = await fn();
    setSaid(done(r));
    await reload();
    return r;
  };
  // ask confirms an action first; its refusal is shown at the top.
  const ask = (text, yes, fn, done) => setConfirm({text, yes, go: () => act(fn, done).catch(setError)});
  const home = d && d.vols.volumes.find((v) => v.kind === 'home');
  const disks = d ? d.vols.volumes.filter((v) => v.kind === 'disk') : [];
  return html`<${Header} session=${session} />
  <main id="main" tabindex="-1" class="storage">
    <div class="title-row"><h1>${t('st_title')}</h1>
      <span class=${'live ' + (live ? 'on' : 'off')}>${live ? t('live') : t('offline')}</span></div>
    <p class="intro">${t('st_intro')}</p>
    <${Problem} error=${error} />
    <p role="status" class="said">${said}</p>
    ${!d && !error && html`<p class="hint" aria-busy="true">…</p>`}
    ${d && html`
      <${Home} vol=${home} rec=${d.home} me=${me} act=${act} />
      <${Shares} list=${d.shares} />
      <${Disks} list=${d.vols} disks=${disks} vms=${d.vms} act=${act} ask=${ask} say=${setSaid} />
      <${Snapshots} vms=${d.vms} snaps=${d.snaps} act=${act} ask=${ask} />`}
    ${confirm && html`<${Confirm} text=${confirm.text} yes=${confirm.yes} danger=${true}
      onYes=${() => { const c = confirm; setConfirm(null); c.go(); }} onNo=${() => setConfirm(null)} />`}
  </main>`;
}

// Bar: used of quota, as a bar (words beside it for screen readers).
function Bar({used, quota}) {
  const frac = Math.min(used / quota, 1);
  const level = used >= quota ? 'over' : frac >= 0.9 ? 'near' : 'ok';
  return html`<svg class=${'bar ' + level} viewBox="0 0 100 6" preserveAspectRatio="none" aria-hidden="true" focusable="false">
    <rect class="track" x="0" y="0" width="100" height="6" rx="1" />
    <rect class="fill" x="0" y="0" width=${(frac * 100).toFixed(2)} height="6" rx="1" />
  </svg>`;
}

// Home: where the guest mounts it, the node it lives on, used against
// its quota, how the quota holds, and the way to delete it; or that the
// caller has none now (rec, GET /v1/homes, says it does not exist); or
// that the server keeps no homes.
function Home({vol, rec, me, act}) {
  if (!vol) {
    return html`<section class="card" id="home" aria-labelledby="home-title"><h2 id="home-title">${t('st_home')}</h2>
      <p>${t('st_noHome')}</p></section>`;
  }
  if (rec && !rec.exists) {
    return html`<section class="card" id="home" aria-labelledby="home-title" data-exists="false"><h2 id="home-title">${t('st_home')}</h2>
      <p id="home-mount">${homeAt(vol.mount)}</p>
      <${HomeHost} rec=${rec} />
      <p id="home-none">${t('st_homeNone')}</p></section>`;
  }
  const known = vol.used_bytes != null;
  const q = vol.quota_bytes;
  const words = {used: fmtBytes(vol.used_bytes || 0), quota: q ? fmtBytes(q) : '', pct: q ? pctFmt.format((vol.used_bytes || 0) / q) : ''};
  return html`<section class="card" id="home" aria-labelledby="home-title"><h2 id="home-title">${t('st_home')}</h2>
    <p id="home-mount">${homeAt(vol.mount)}</p>
    <${HomeHost} rec=${rec} />
    ${!known && html`<p class="hint" id="home-usage">${t('st_notMeasured')}</p>`}
    ${known && html`<div class="meter"><p id="home-usage"><span aria-hidden="true">${q ? t('st_used', words) : t('st_usedNoQuota', words)}</span>
      <span class="sr-only">${q ? t('st_usedSR', words) : t('st_usedNoQuota', words)}</span></p>
      ${q ? html`<${Bar} used=${vol.used_bytes} quota=${q} />` : null}</div>`}
    ${known && (vol.enforcement === 'project' || vol.enforcement === 'image') && html`<p id="home-enforcement">${t('st_enforced')}</p>`}
    ${known && vol.enforcement === 'none' && html`<p id="home-enforcement" class="warn">${t('st_notEnforced')}</p>`}
    <${ServerWords} text=${vol.note} />
    ${rec && html`<${HomeDelete} me=${me} act=${act} />`}
  </section>`;
}

// HomeHost: the node the caller's home lives on (GET /v1/homes'
// home_host), where one is recorded; nothing on a server that records
// none (a single node's).
function HomeHost({rec}) {
  if (!rec || !rec.home_host) return null;
  return html`<p id="home-host">${t('st_homeHost', {host: rec.home_host})}</p>`;
}

// HomeDelete: the button that deletes the caller's home, and its dialog:
// what is lost, the caller's name typed again (the button to delete
// stays disabled until it matches), the server's refusal beside the
// field (a 409 names the VMs to stop). Escape closes it.
function HomeDelete({me, act}) {
  const [open, setOpen] = useState(false);
  const close = () => setOpen(false);
  return html`<div class="buttons">
      <button type="button" class="danger" id="home-delete" aria-haspopup="dialog" onClick=${() => setOpen(true)}>${t('st_homeDelete')}</button>
    </div>
    ${open && html`<${HomeDeleteDialog} me=${me} act=${act} onClose=${close} />`}`;
}

function HomeDeleteDialog({me, act, onClose}) {
  const ref = useRef(null), input = useRef(null);
  const [typed, setTyped] = useState('');
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    const d = ref.current;
    d.showModal();
    input.current.focus();
    return () => d.open && d.close();
  }, []);
  const submit = async (e) => {
    e.preventDefault();
    if (typed !== me) return;
    setBusy(true);
    try {
      await act(() => api.deleteHome(me, typed), () => t('st_homeDeleted'));
      onClose();
    } catch (x) { setErr(x); setBusy(false); }
  };
  const errID = 'home-confirm-error';
  return html`<dialog ref=${ref} class="confirm home-delete" id="home-delete-dialog" aria-labelledby="home-delete-title"
      onCancel=${(e) => { e.preventDefault(); onClose(); }}>
    <form onSubmit=${submit}>
      <h2 id="home-delete-title">${t('st_homeDeleteTitle')}</h2>
      <ul class="lost">
        <li>${t('st_homeLoseAll')}</li>
        <li>${t('st_homeEveryVM')}</li>
        <li>${t('st_homeNothingElse')}</li>
        <li>${t('st_homeStopFirst')}</li>
      </ul>
      <label for="home-confirm">${t('st_homeType', {user: me})}</label>
      <input id="home-confirm" ref=${input} value=${typed} autocomplete="off" autocapitalize="off" spellcheck="false"
        onInput=${(e) => { setTyped(e.target.value); setErr(null); }}
        aria-invalid=${err ? 'true' : undefined} aria-describedby=${err ? errID : undefined} />
      ${err && html`<p class="field-error" id=${errID} role="alert">${err.message}</p>`}
      <div class="buttons">
        <button type="submit" class="danger" id="home-delete-yes" disabled=${typed !== me || busy}>${t('st_homeDeleteYes')}</button>
        <button type="button" class="quiet" onClick=${onClose}>${t('cancel')}</button>
      </div>
    </form>
  </dialog>`;
}

// ServerWords: the server's own words (English, written for admins),
// folded away.
function ServerWords({text}) {
  if (!text) return null;
  return html`<details class="server-words"><summary>${t('st_serverWords')}</summary><p lang="en">${text}</p></details>`;
}

// homeAt says where the home is mounted, the path as code.
function homeAt(mount) {
  const [before, after] = t('st_homeAt', {mount: '\u0000'}).split('\u0000');
  return html`${before}<code>${mount}</code>${after}`;
}

// Shares: each share the caller may mount, and how to ask for one.
function Shares({list}) {
  const shares = (list && list.shares) || [];
  return html`<section class="card" id="shares" aria-labelledby="shares-title"><h2 id="shares-title">${t('st_shares')}</h2>
    <p class="hint">${t('st_sharesIntro')}</p>
    ${list && list.error && html`<${Problem} error=${list.error} />`}
    ${list && !list.error && !shares.length && html`<p>${t('st_noShares')}</p>`}
    ${shares.length > 0 && html`<ul class="items">${shares.map((s) => html`<li id=${'share-' + s.name}>
      <h3>${s.name}${s.description && html` <span class="pname">— ${s.description}</span>`}</h3>
      <dl class="facts">
        <div><dt>${t('st_mode')}</dt><dd class="mode">${s.mode === 'ro' ? t('st_ro') : s.mode === 'rw' ? t('st_rw') : t('none')}</dd></div>
        <div><dt>${t('st_mount')}</dt><dd><code>${s.mount}</code></dd></div>
        ${s.rule && html`<div><dt>${t('st_rule')}</dt><dd><code>${s.rule}</code></dd></div>`}
      </dl>
      ${s.mode === 'ro' && html`<p class="enforcement">${s.enforcement && s.enforcement !== 'none' ? t('st_roEnforced') : t('st_roNotEnforced')}</p>`}
      <${ShareQuota} s=${s} />
      ${!s.available && html`<p class="warn">${t('st_unavailable')}</p>
        <${ServerWords} text=${s.unavailable} />`}
    </li>`)}</ul>`}
    <p>${t('st_askShare')}${gap()}<code>gpuvm create PROFILE --share ${shares.length ? shares[0].name : 'NAME'}</code></p>
    <p class="hint">${t('st_askShareForm')}</p>
  </section>`;
}

// ShareQuota: a share's quota, what it uses as last read, and whether
// the quota is enforced (nothing for a share without one).
function ShareQuota({s}) {
  if (!s.quota_bytes) return null;
  if (s.used_bytes == null) return html`<p class="share-usage">${t('st_shareQuota', {quota: fmtBytes(s.quota_bytes)})}</p>`;
  const words = {used: fmtBytes(s.used_bytes), quota: fmtBytes(s.quota_bytes), pct: pctFmt.format(s.used_bytes / s.quota_bytes)};
  return html`<div class="meter"><p class="share-usage">${t('st_used', words)}</p><${Bar} used=${s.used_bytes} quota=${s.quota_bytes} /></div>
    ${s.quota_enforcement === 'none' && html`<p class="warn share-enforcement">${t('st_shareNotEnforced')}</p>`}`;
}

// fieldOf is the field a refusal names (problem+json's field), or ''.
const fieldOf = (err) => (err && err.problem && err.problem.field) || '';

// Err shows a refusal in the server's words beside field: the form's
// fields (fields) own theirs; any other refusal goes to the form's '*'.
function Err({id, err, field, fields}) {
  if (!err) return null;
  const f = fieldOf(err);
  if (field === '*' ? fields.includes(f) : f !== field) return null;
  return html`<p class="field-error" id=${id} role="alert">${err.message}</p>`;
}

// errAttrs mark a field a refusal names: invalid, described by its words.
const errAttrs = (err, field, id) => (err && fieldOf(err) === field ? {'aria-invalid': 'true', 'aria-describedby': id} : {});

// Disks: the disk quota, each data disk with its actions, and the form
// that makes one.
function Disks({list, disks, vms, act, ask, say}) {
  const q = list.quota_bytes;
  const words = {used: fmtBytes(list.used_bytes || 0), quota: q ? fmtBytes(q) : '', pct: q ? pctFmt.format((list.used_bytes || 0) / q) : '', rule: list.rule || ''};
  return html`<section class="card" id="disks" aria-labelledby="disks-title"><h2 id="disks-title">${t('st_disks')}</h2>
    <p class="hint">${t('st_disksIntro')}</p>
    <div class="meter" id="disk-quota">
      ${q ? html`<p><span aria-hidden="true">${t('st_diskQuota', words)}</span><span class="sr-only">${sentences(t('st_diskQuotaSR', words), list.rule)}</span></p>
        <${Bar} used=${list.used_bytes || 0} quota=${q} />` : html`<p>${t('st_diskNoQuota', words)}</p>`}
    </div>
    ${!disks.length && html`<p id="no-disks">${t('st_noDisks')}</p>`}
    ${disks.length > 0 && html`<ul class="items">${disks.map((v) => html`<${Disk} key=${v.id} v=${v} vms=${vms} act=${act} ask=${ask} say=${say} />`)}</ul>`}
    <${CreateDisk} act=${act} />
  </section>`;
}

// CreateDisk: a name and a size.
function CreateDisk({act}) {
  const [name, setName] = useState('');
  const [size, setSize] = useState('');
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    try {
      await act(() => api.createVolume(name.trim(), size.trim()), () => t('st_created', {name: name.trim()}));
      setName(''); setSize(''); setErr(null);
    } catch (x) { setErr(x); } finally { setBusy(false); }
  };
  const fields = ['name', 'size'];
  return html`<form class="inline" id="create-disk" onSubmit=${submit} aria-labelledby="create-disk-title">
    <h3 id="create-disk-title">${t('st_create')}</h3>
    <div class="row">
      <div class="field"><label for="disk-name">${t('st_name')}</label>
        <input id="disk-name" value=${name} required autocomplete="off" onInput=${(e) => setName(e.target.value)} ...${errAttrs(err, 'name', 'disk-name-error')} />
        <p class="hint">${t('st_nameHint')}</p>
        <${Err} id="disk-name-error" err=${err} field="name" /></div>
      <div class="field"><label for="disk-size">${t('st_size')}</label>
        <input id="disk-size" value=${size} required placeholder="20 GiB" autocomplete="off" onInput=${(e) => setSize(e.target.value)} ...${errAttrs(err, 'size', 'disk-size-error')} />
        <p class="hint">${t('st_sizeHint')}</p>
        <${Err} id="disk-size-error" err=${err} field="size" /></div>
    </div>
    <${Err} id="create-disk-error" err=${err} field="*" fields=${fields} />
    <div class="buttons"><button type="submit" disabled=${busy}>${t('st_createYes')}</button></div>
  </form>`;
}

// settle waits for the operation that plugs a disk into, or out of, a
// running VM (the answer's operation_id): its failure is the action's, in
// the server's words.
async function settle(r) {
  if (!r || !r.operation_id) return r;
  for (let i = 0; i < 240; i++) {
    const op = await api.operation(r.operation_id);
    if (op.state === 'done') return r;
    if (op.state === 'failed') throw new api.APIError(409, {detail: op.error});
    await new Promise((ok) => setTimeout(ok, 500));
  }
  throw new api.APIError(504, {detail: t('st_stillPlugging', {op: r.operation_id})});
}

// Disk: one data disk, its facts and its actions: grow, attach or detach
// (plugged in or out at once when its VM runs), delete (detached only).
function Disk({v, vms, act, ask, say}) {
  const [open, setOpen] = useState(''); // '', 'grow' or 'attach'
  const [err, setErr] = useState(null);
  const id = 'disk-' + v.name;
  const run = async (fn, done) => {
    try { await act(fn, done); setErr(null); setOpen(''); } catch (x) { setErr(x); }
  };
  const toggle = (what) => { setErr(null); setOpen(open === what ? '' : what); };
  return html`<li id=${id} data-state=${v.state} data-attached=${v.attached_vm_name || ''}>
    <h3>${v.name}</h3>
    <dl class="facts">
      <div><dt>${t('st_size')}</dt><dd class="size">${fmtBytes(v.size_bytes)}</dd></div>
      <div><dt>${t('st_state')}</dt><dd class="state">${diskState(v.state)}${v.error && html` — ${v.error}`}</dd></div>
      <div><dt>${t('st_attached')}</dt><dd class="attached">${v.attached_vm_name || t('st_detached')}</dd></div>
      <div><dt>${t('st_device')}</dt><dd><code>${v.guest_device}</code></dd></div>
    </dl>
    <div class="buttons">
      <button type="button" class="quiet" aria-expanded=${open === 'grow'} onClick=${() => toggle('grow')}>${t('st_grow')}</button>
      ${v.attached_vm_name
        ? html`<button type="button" class="quiet" disabled=${v.state === 'detaching'} onClick=${() => run(async () => {
            const r = await api.detachVolume(v.id);
            if (r.operation_id) say(t('st_unplugging', {name: v.name}));
            return settle(r);
          }, (r) => t(r.operation_id ? 'st_unplugged' : 'st_detachedFrom', {name: v.name}))}>${t('st_detach')}</button>`
        : html`<button type="button" class="quiet" aria-expanded=${open === 'attach'} onClick=${() => toggle('attach')}>${t('st_attach')}</button>`}
      <button type="button" class="danger" disabled=${!!v.attached_vm_name} aria-describedby=${v.attached_vm_name ? id + '-why' : undefined}
        onClick=${() => ask(t('st_confirmDeleteDisk', {name: v.name}), t('st_delete'), () => api.deleteVolume(v.id), () => t('st_deleted', {name: v.name}))}>${t('st_delete')}</button>
    </div>
    ${v.attached_vm_name && html`<p class="hint" id=${id + '-why'}>${t('st_detachFirst')}</p>`}
    ${open === 'grow' && html`<${Grow} v=${v} id=${id} err=${err} run=${run} />`}
    ${open === 'attach' && html`<${Attach} v=${v} id=${id} vms=${vms} err=${err} run=${run} say=${say} />`}
    <${Err} id=${id + '-error'} err=${!open ? err : null} field="*" fields=${[]} />
  </li>`;
}

function Grow({v, id, err, run}) {
  const [size, setSize] = useState('');
  const submit = (e) => {
    e.preventDefault();
    run(() => api.resizeVolume(v.id, size.trim()), (r) => t('st_grown', {name: v.name, size: fmtBytes(r.size_bytes)}));
  };
  return html`<form class="inline" onSubmit=${submit}>
    <label for=${id + '-size'}>${t('st_growTo', {name: v.name})}</label>
    <input id=${id + '-size'} value=${size} required placeholder=${fmtBytes(v.size_bytes * 2)} autocomplete="off"
      onInput=${(e) => setSize(e.target.value)} ...${errAttrs(err, 'size', id + '-size-error')} />
    <${Err} id=${id + '-size-error'} err=${err} field="size" />
    <${Err} id=${id + '-grow-error'} err=${err} field="*" fields=${['size']} />
    <div class="buttons"><button type="submit">${t('st_growYes')}</button></div>
  </form>`;
}

function Attach({v, id, vms, err, run, say}) {
  const [vm, setVM] = useState(vms.length ? vms[0].id : '');
  const submit = (e) => {
    e.preventDefault();
    const name = (vms.find((x) => x.id === vm) || {}).name || vm;
    run(async () => {
      const r = await api.attachVolume(v.id, vm);
      if (r.operation_id) say(t('st_plugging', {name: v.name, vm: name}));
      return settle(r);
    }, (r) => r.operation_id ? t('st_plugged', {name: v.name, vm: name, dev: r.guest_device}) : t('st_attachedTo', {name: v.name, vm: name}));
  };
  if (!vms.length) return html`<p class="hint">${t('st_noVMs')}</p>`;
  return html`<form class="inline" onSubmit=${submit}>
    <label for=${id + '-vm'}>${t('st_attachTo', {name: v.name})}</label>
    <select id=${id + '-vm'} value=${vm} onChange=${(e) => setVM(e.target.value)} ...${errAttrs(err, 'vm', id + '-vm-error')}>
      ${vms.map((x) => html`<option value=${x.id}>${t('st_vmOption', {name: x.name, state: stateWord(x.state)})}</option>`)}
    </select>
    <${Err} id=${id + '-vm-error'} err=${err} field="vm" />
    <${Err} id=${id + '-attach-error'} err=${err} field="*" fields=${['vm']} />
    <div class="buttons"><button type="submit">${t('st_attachYes')}</button></div>
  </form>`;
}

// Snapshots: the form that takes one, and each VM's snapshots.
function Snapshots({vms, snaps, act, ask}) {
  const withSnaps = vms.filter((vm) => snaps[vm.id] && (snaps[vm.id].error || (snaps[vm.id].snapshots || []).length));
  const keep = vms.map((vm) => snaps[vm.id]).find((l) => l && l.keep != null);
  return html`<section class="card" id="snapshots" aria-labelledby="snaps-title"><h2 id="snaps-title">${t('st_snaps')}</h2>
    <p class="hint">${t('st_snapsIntro')}</p>
    ${keep && html`<p id="snap-keep">${t('st_snapKeep', {n: keep.keep, rule: keep.rule})}</p>`}
    <${TakeSnapshot} vms=${vms.filter((vm) => vm.state === 'running' || vm.state === 'stopped')} act=${act} />
    ${!withSnaps.length && html`<p id="no-snaps">${t('st_noSnaps')}</p>`}
    ${withSnaps.map((vm) => html`<div class="vm-snaps" id=${'snaps-' + vm.name}>
      <h3>${t('st_snapOf', {vm: vm.name, state: stateWord(vm.state)})}</h3>
      ${snaps[vm.id].error ? html`<p class="notice error">${t('st_snapsLoad', {vm: vm.name, msg: snaps[vm.id].error.message})}</p>`
        : html`<ul class="items">${snaps[vm.id].snapshots.map((s) => html`<${Snap} key=${s.id} s=${s} vm=${vm} ask=${ask} />`)}</ul>`}
    </div>`)}
  </section>`;
}

function TakeSnapshot({vms, act}) {
  const [vm, setVM] = useState('');
  const [label, setLabel] = useState('');
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const chosen = vms.find((x) => x.id === vm) || vms[0];
  if (!vms.length) return html`<p class="hint" id="take-snapshot">${t('st_noSnapVMs')}</p>`;
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    try {
      await act(() => api.takeSnapshot(chosen.id, label.trim()), () => t('st_taken', {vm: chosen.name}));
      setLabel(''); setErr(null);
    } catch (x) { setErr(x); } finally { setBusy(false); }
  };
  return html`<form class="inline" id="take-snapshot" onSubmit=${submit} aria-labelledby="take-title">
    <h3 id="take-title">${t('st_take')}</h3>
    <div class="row">
      <div class="field"><label for="snap-vm">${t('st_takeVM')}</label>
        <select id="snap-vm" value=${chosen.id} onChange=${(e) => setVM(e.target.value)} ...${errAttrs(err, 'id', 'snap-vm-error')}>
          ${vms.map((x) => html`<option value=${x.id}>${t('st_vmOption', {name: x.name, state: stateWord(x.state)})}</option>`)}
        </select>
        <${Err} id="snap-vm-error" err=${err} field="id" /></div>
      <div class="field"><label for="snap-label">${t('st_label')}</label>
        <input id="snap-label" value=${label} maxlength="64" autocomplete="off" onInput=${(e) => setLabel(e.target.value)} ...${errAttrs(err, 'label', 'snap-label-error')} />
        <p class="hint">${t('st_labelHint')}</p>
        <${Err} id="snap-label-error" err=${err} field="label" /></div>
    </div>
    <${Err} id="take-error" err=${err} field="*" fields=${['id', 'label']} />
    <div class="buttons"><button type="submit" disabled=${busy}>${t('st_takeYes')}</button></div>
  </form>`;
}

// Snap: one snapshot: its label, state, consistency and times; restore
// (its VM stopped: else the button says why not) and delete, confirmed.
function Snap({s, vm, ask}) {
  const id = 'snap-' + s.id;
  const stopped = vm.state === 'stopped';
  const ready = s.state === 'ready';
  const words = {vm: vm.name, label: labelOf(s), at: fmtTime(s.created_at)};
  return html`<li id=${id} data-state=${s.state} data-consistency=${s.consistency || ''}>
    <h4>${labelOf(s)}</h4>
    <dl class="facts">
      <div><dt>${t('st_state')}</dt><dd class="state">${snapState(s.state)}${s.error && html` — ${s.error}`}</dd></div>
      <div><dt>${t('st_consistency')}</dt><dd class="consistency">${consistencyWords(s.consistency)}</dd></div>
      <div><dt>${t('st_takenAt')}</dt><dd><time datetime=${s.created_at}>${fmtTime(s.created_at)}</time></dd></div>
      <div><dt>${t('st_expires')}</dt><dd>${s.expires_at ? html`<time datetime=${s.expires_at}>${fmtTime(s.expires_at)}</time>` : t('st_never')}</dd></div>
      ${s.restored_at && html`<div><dt>${t('st_restoredAt')}</dt><dd><time datetime=${s.restored_at}>${fmtTime(s.restored_at)}</time></dd></div>`}
    </dl>
    <div class="buttons">
      <button type="button" class="restore" disabled=${!stopped || !ready} aria-describedby=${!stopped ? id + '-why' : undefined}
        onClick=${() => ask(t('st_confirmRestore', words), t('st_restore'), () => api.restoreSnapshot(vm.id, s.id), () => t('st_restoring', words))}>${t('st_restore')}</button>
      <button type="button" class="danger" disabled=${!ready && s.state !== 'failed'}
        onClick=${() => ask(t('st_confirmDeleteSnap', words), t('st_delete'), () => api.deleteSnapshot(vm.id, s.id), () => t('st_snapDeleted', words))}>${t('st_delete')}</button>
    </div>
    ${!stopped && html`<p class="hint why" id=${id + '-why'}>${t('st_stopFirst', {vm: vm.name})}</p>`}
  </li>`;
}
