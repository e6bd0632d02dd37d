// pages/fleet.js: /admin/fleet, every host and GPU as a picture (admins):
// a MIG GPU as its compute and memory slices with what holds each, a vGPU
// GPU's types used and free, a passed-through GPU's holder, drains, with
// drain and undrain. It reads GET /v1/hosts, whose answer to an admin
// carries each GPU's devices and their holders (gpu_detail), again on
// every VM event and drain (host.drain, gpu.drain), and every 30 s for
// the heartbeats, which make no event.
import {html, useState, useEffect, useCallback} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t, addWords, fmtTime, fmtRelative, stateWord} from '../i18n.js';
import {Header, Problem, Confirm, useEvents} from '../ui.js';

addWords({
  en: {
    fleetTitle: 'Fleet', fleetIntro: 'Every host and GPU, as their last heartbeats saw them, updated live.',
    adminsOnly: 'For admins only.', noHosts: 'No host has registered yet.',
    hostUp: 'up', hostDown: 'down', hostDraining: 'drained', leader: 'leads the fleet', thisNode: 'this node',
    heartbeat: 'Heartbeat', version: 'Version', gpusN: 'GPUs',
    drainHost: 'Drain host', undrainHost: 'Undrain host', drainGPU: 'Drain GPU', undrainGPU: 'Undrain GPU',
    confirmDrainHost: 'Drain host {name}? It takes no new VMs; the VMs on it stay until they are deleted or their leases end.',
    confirmUndrainHost: 'Undrain host {name}? It takes VMs again.',
    confirmDrainGPU: 'Drain GPU {addr} of {host}? It takes no new VMs; what runs on it stays.',
    confirmUndrainGPU: 'Undrain GPU {addr} of {host}? It takes VMs again.',
    drainYes: 'Yes, drain', undrainYes: 'Yes, undrain',
    drained: 'drained', drainedBy: 'Drained by {by} {when}', drainedWhy: 'Drained by {by} {when}: {why}',
    drainElsewhere: 'Drain or undrain this GPU at the gpuvmd of {host}.',
    modes: {idle: 'idle', mig: 'MIG', vgpu: 'vGPU', passthrough: 'passthrough'},
    compute: 'compute', memorySlices: 'memory',
    migPicture: 'MIG slices of {addr}: {n} instances on {c} compute and {m} memory slices',
    slices: 'slices {a}–{b}', slice: 'slice {a}',
    heldBy: '{owner}/{vm} ({profile}, {state})', heldUnknown: 'VM {id}, unknown to gpuvm', heldNone: 'no VM',
    vgpuTypes: 'vGPU types', usedFree: '{u} used, {f} free', vgpuPicture: '{type}: {u} used, {f} free',
    passHeld: 'Passed through to {who}', passFree: 'Not passed through to any VM', idleGPU: 'Idle: nothing is made on it.',
    noInventory: 'Its heartbeat listed no GPU.', fleetDone: '{what}: done.',
  },
  'zh-CN': {
    fleetTitle: '机群', fleetIntro: '所有主机和 GPU，按其最近一次心跳所见，实时更新。',
    adminsOnly: '仅限管理员。', noHosts: '还没有主机注册。',
    hostUp: '在线', hostDown: '离线', hostDraining: '已排空', leader: '机群主节点', thisNode: '本节点',
    heartbeat: '心跳', version: '版本', gpusN: 'GPU 数',
    drainHost: '排空主机', undrainHost: '取消排空主机', drainGPU: '排空 GPU', undrainGPU: '取消排空 GPU',
    confirmDrainHost: '排空主机 {name}？它不再接收新虚拟机；其上的虚拟机保留到被删除或租期结束。',
    confirmUndrainHost: '取消排空主机 {name}？它将重新接收虚拟机。',
    confirmDrainGPU: '排空 {host} 的 GPU {addr}？它不再接收新虚拟机；正在运行的保留。',
    confirmUndrainGPU: '取消排空 {host} 的 GPU {addr}？它将重新接收虚拟机。',
    drainYes: '确定排空', undrainYes: '确定取消排空',
    drained: '已排空', drainedBy: '{by} 于 {when} 排空', drainedWhy: '{by} 于 {when} 排空：{why}',
    drainElsewhere: '请在 {host} 的 gpuvmd 上排空或取消排空此 GPU。',
    modes: {idle: '空闲', mig: 'MIG', vgpu: '虚拟 GPU', passthrough: '直通'},
    compute: '计算', memorySlices: '显存',
    migPicture: '{addr} 的 MIG 切片：{n} 个实例，共 {c} 个计算切片和 {m} 个显存切片',
    slices: '切片 {a}–{b}', slice: '切片 {a}',
    heldBy: '{owner}/{vm}（{profile}，{state}）', heldUnknown: '虚拟机 {id}，gpuvm 不认识', heldNone: '无虚拟机',
    vgpuTypes: '虚拟 GPU 类型', usedFree: '已用 {u}，空闲 {f}', vgpuPicture: '{type}：已用 {u}，空闲 {f}',
    passHeld: '直通给 {who}', passFree: '未直通给任何虚拟机', idleGPU: '空闲：其上没有任何设备。',
    noInventory: '其心跳未列出 GPU。', fleetDone: '{what}：已完成。',
  },
});

const hostWord = (s) => t({up: 'hostUp', down: 'hostDown', draining: 'hostDraining'}[s] || s);
const modeWord = (m) => (t('modes') || {})[m] || m;

// who says what holds a device, in words.
export function who(d) {
  if (d.vm) return t('heldBy', {owner: d.vm.owner, vm: d.vm.name, profile: d.vm.profile, state: stateWord(d.vm.state)});
  return d.vm_id ? t('heldUnknown', {id: d.vm_id}) : t('heldNone');
}

export default function Fleet({session}) {
  const admin = session && session.user.admin;
  const [hosts, setHosts] = useState(null);
  const [error, setError] = useState(null);
  const [live, setLive] = useState(false);
  const [confirm, setConfirm] = useState(null);
  const [said, setSaid] = useState('');

  const load = useCallback(async () => {
    if (!admin) return;
    try { setHosts((await api.hosts()).items || []); setError(null); } catch (err) { setError(err); }
  }, [admin]);
  useEffect(() => { load(); }, [load]);
  useEffect(() => {
    if (!admin) return undefined;
    const tick = setInterval(load, 30000);
    return () => clearInterval(tick);
  }, [load]);
  useEvents(admin ? ['vm.created', 'vm.state', 'vm.action', 'host.drain', 'gpu.drain'] : [], load, setLive, setError);

  if (!admin) {
    return html`<${Header} session=${session} />
    <main id="main" tabindex="-1"><h1>${t('fleetTitle')}</h1><p class="notice error" id="admins-only">${t('adminsOnly')}</p></main>`;
  }
  const act = async ({run, what}) => {
    setConfirm(null);
    try { await run(); setSaid(t('fleetDone', {what})); await load(); } catch (err) { setError(err); }
  };
  return html`<${Header} session=${session} />
  <main id="main" tabindex="-1" class="wide">
    <div class="title-row">
      <h1>${t('fleetTitle')}</h1>
      <span class=${'live ' + (live ? 'on' : 'off')} id="live">${live ? t('live') : t('offline')}</span>
    </div>
    <p class="intro">${t('fleetIntro')}</p>
    <${Problem} error=${error} />
    <p class="sr-only" role="status" aria-live="polite">${said}</p>
    ${hosts && hosts.length === 0 && html`<p class="notice">${t('noHosts')}</p>`}
    <div class="hosts" aria-busy=${hosts === null}>
      ${(hosts || []).map((h) => html`<${HostCard} key=${h.name} h=${h} ask=${setConfirm} />`)}
    </div>
    ${confirm && html`<${Confirm} text=${confirm.text} yes=${confirm.yes} danger=${confirm.danger}
      onYes=${() => act(confirm)} onNo=${() => setConfirm(null)} />`}
  </main>`;
}

function HostCard({h, ask}) {
  const id = 'host-' + h.name;
  const draining = h.state === 'draining';
  const toggle = () => ask(draining
    ? {text: t('confirmUndrainHost', {name: h.name}), yes: t('undrainYes'), what: t('undrainHost'), run: () => api.undrainHost(h.name)}
    : {text: t('confirmDrainHost', {name: h.name}), yes: t('drainYes'), danger: true, what: t('drainHost'), run: () => api.drainHost(h.name)});
  return html`<section class=${'card host h-' + h.state} id=${id} aria-labelledby=${id + '-name'} data-state=${h.state}>
    <div class="host-head">
      <h2 id=${id + '-name'}>${h.name}</h2>
      <span class=${'badge h-' + h.state} data-testid="host-state">${hostWord(h.state)}</span>
      ${h.leader && html`<span class="badge">${t('leader')}</span>`}
      ${h.this_node && html`<span class="badge">${t('thisNode')}</span>`}
      <button type="button" class=${draining ? '' : 'danger'} data-testid="host-drain" onClick=${toggle}>
        ${draining ? t('undrainHost') : t('drainHost')}</button>
    </div>
    <dl class="facts inline">
      <div><dt>${t('heartbeat')}</dt><dd><time datetime=${h.heartbeat_at}>${fmtRelative(h.heartbeat_at)}</time></dd></div>
      ${h.version && html`<div><dt>${t('version')}</dt><dd>${h.version}</dd></div>`}
      <div><dt>${t('gpusN')}</dt><dd>${h.gpus}${h.drained_gpus ? ' (' + h.drained_gpus + ' ' + t('drained') + ')' : ''}</dd></div>
    </dl>
    ${(h.gpu_detail || []).length === 0 && html`<p class="hint">${t('noInventory')}</p>`}
    <ul class="gpus">
      ${(h.gpu_detail || []).map((g) => html`<${GPUCard} key=${g.address} host=${h} g=${g} ask=${ask} />`)}
    </ul>
  </section>`;
}

function GPUCard({host, g, ask}) {
  const id = 'gpu-' + host.name + '-' + g.address.replace(/[:.]/g, '-');
  const drained = !!g.drained;
  const toggle = () => ask(drained
    ? {text: t('confirmUndrainGPU', {addr: g.address, host: host.name}), yes: t('undrainYes'), what: t('undrainGPU'), run: () => api.undrainGPU(g.address)}
    : {text: t('confirmDrainGPU', {addr: g.address, host: host.name}), yes: t('drainYes'), danger: true, what: t('drainGPU'), run: () => api.drainGPU(g.address)});
  return html`<li class=${'gpu m-' + g.mode + (drained ? ' is-drained' : '')} id=${id} data-address=${g.address}
      data-drained=${drained ? 'yes' : 'no'} aria-labelledby=${id + '-name'}>
    <div class="gpu-head">
      <h3 id=${id + '-name'}><span class="addr">${g.address}</span> ${g.model}</h3>
      <span class=${'badge mode m-' + g.mode}>${modeWord(g.mode)}</span>
      ${drained && html`<span class="badge drained" data-testid="drained">${t('drained')}</span>`}
    </div>
    ${drained && html`<p class="drain-note">${t(g.drained.reason ? 'drainedWhy' : 'drainedBy',
      {by: g.drained.by, when: fmtTime(g.drained.since), why: g.drained.reason})}</p>`}
    ${g.mode === 'mig' && html`<${MIGPicture} g=${g} />`}
    ${g.mode === 'vgpu' && html`<${VGPUPicture} g=${g} />`}
    ${g.mode === 'passthrough' && html`<p class="holder">${g.held.length ? t('passHeld', {who: g.held.map(who).join(', ')}) : t('passFree')}</p>`}
    ${g.mode === 'idle' && html`<p class="hint">${t('idleGPU')}</p>`}
    ${host.this_node
      ? html`<div class="buttons"><button type="button" class=${drained ? 'quiet' : 'danger quiet'} data-testid="gpu-drain" onClick=${toggle}>
          ${drained ? t('undrainGPU') : t('drainGPU')}</button></div>`
      : html`<p class="hint">${t('drainElsewhere', {host: host.name})}</p>`}
  </li>`;
}

// Layout of the MIG picture, in SVG user units.
const cellW = 40, rowH = 34, labelW = 74, gap = 6;

// MIGPicture draws a MIG GPU as two rows, its compute slices above its
// memory slices, each instance a block over the slices it takes in both,
// in one of six colours (the same block, the same colour); the list under
// it says the same in words.
function MIGPicture({g}) {
  const c = g.mig_compute_slices || 7, m = g.mig_memory_slices || 8;
  const placed = g.held.filter((d) => d.mig);
  const width = labelW + m * cellW, height = rowH * 2 + gap;
  const row = (y, n, label) => html`<g>
    <text x="0" y=${y + rowH / 2 + 5} class="axis">${label}</text>
    ${Array.from({length: n}, (_, i) => html`<rect x=${labelW + i * cellW + 1} y=${y} width=${cellW - 2} height=${rowH} rx="3" class="slot" />`)}
  </g>`;
  const block = (d, i, y, start, size, label) => html`<g class=${'held c' + (i % 6)}>
    <rect x=${labelW + start * cellW + 1} y=${y} width=${size * cellW - 2} height=${rowH} rx="3"><title>${label}</title></rect>
    ${size * cellW >= 56 && html`<text x=${labelW + (start + size / 2) * cellW} y=${y + rowH / 2 + 5} text-anchor="middle">${short(d, size)}</text>`}
  </g>`;
  const labelOf = (d) => d.type + ' · ' + who(d);
  return html`<figure class="mig">
    <svg viewBox=${`0 0 ${width} ${height}`} width="100%" role="img" class="mig-svg"
      aria-label=${t('migPicture', {addr: g.address, n: placed.length, c, m})}>
      ${row(0, c, t('compute'))}
      ${row(rowH + gap, m, t('memorySlices'))}
      ${placed.map((d, i) => block(d, i, 0, d.mig.compute_start, d.mig.compute_size, labelOf(d)))}
      ${placed.map((d, i) => block(d, i, rowH + gap, d.mig.memory_start, d.mig.memory_size, labelOf(d)))}
    </svg>
    <figcaption>
      <ul class="held-list">
        ${g.held.map((d, i) => html`<li data-device=${d.id} data-start=${d.mig ? d.mig.memory_start : ''}>
          <span class=${'swatch c' + (i % 6)} aria-hidden="true"></span>
          <span class="where">${d.mig ? sliceWords(d.mig.memory_start, d.mig.memory_size) : ''}</span>${' '}<b>${d.type}</b>${' ' + who(d)}</li>`)}
      </ul>
    </figcaption>
  </figure>`;
}

const sliceWords = (start, size) => (size > 1 ? t('slices', {a: start, b: start + size - 1}) : t('slice', {a: start}));
// short is the block's label: the VM's name, else its owner, when it fits.
const short = (d, size) => {
  const s = d.vm ? d.vm.name : (d.vm_id || '?');
  const room = Math.floor((size * cellW - 8) / 8);
  return s.length > room ? s.slice(0, Math.max(room - 1, 1)) + '…' : s;
};

// VGPUPicture draws each vGPU type the GPU holds or offers as a row of
// cells, filled for those made, hollow for those that could still be.
function VGPUPicture({g}) {
  const types = (g.vgpu_types || []).filter((v) => v.used || v.free);
  return html`<div class="vgpu">
    <ul class="vgpu-types" aria-label=${t('vgpuTypes')}>
      ${types.map((v) => html`<li data-type=${v.type}>
        <span class="vtype">${v.type}</span>
        <span class="cells" role="img" aria-label=${t('vgpuPicture', {type: v.type, u: v.used, f: v.free})}>
          ${Array.from({length: Math.min(v.used + v.free, 48)}, (_, i) => html`<span class=${'cell' + (i < v.used ? ' used' : '')}></span>`)}
        </span>
        <span class="count">${t('usedFree', {u: v.used, f: v.free})}</span>
      </li>`)}
    </ul>
    ${g.held.length > 0 && html`<ul class="held-list">
      ${g.held.map((d) => html`<li data-device=${d.id}><b>${d.type}</b>${' ' + who(d)}</li>`)}
    </ul>`}
  </div>`;
}
