// pages/usage.js: /usage, the caller's GPU-hours today, this week and this
// month against their quotas, the utilisation achieved and the time held
// idle, and day by day (GET /v1/usage/periods), as small charts drawn here
// in SVG (attributes and classes only: the CSP allows no inline style),
// each with its words for screen readers and a table.
import {html, useState, useEffect} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t, addWords, lang} from '../i18n.js';
import {Header, Problem} from '../ui.js';

addWords({
  en: {
    usageTitle: 'My usage',
    usageIntro: 'The GPU time you held, weighted by the share of the GPU (a whole GPU for an hour is 1 GPU-hour, a seventh of one a seventh). Days, weeks (from Monday) and months are those of {tz}, as quotas count them.',
    usageQuotas: 'Against your quotas', usageDay: 'Today', usageWeek: 'This week', usageMonth: 'This month',
    usageOf: '{h} of {q} GPU-hours ({pct})', usageNoQuota: '{h} GPU-hours (no quota)',
    usageOfSR: '{period}: {h} of {q} GPU-hours used, {pct} of the quota', usageNoQuotaSR: '{period}: {h} GPU-hours, no quota',
    usageUtil: 'Utilisation achieved', usageUtilOf: '{period}: {pct} utilisation over {m} measured GPU-hours; {idle} GPU-hours held idle.',
    usageUtilUnknown: '{period}: utilisation not measured (no GPU sample); {h} GPU-hours held.',
    usageUtilSim: '{period}: {h} GPU-hours held on a simulated GPU server, where no real GPU measures utilisation.',
    usageUtilSimPart: '{s} of them on a simulated GPU server, not measured.',
    usageUsed: 'used', usageIdle: 'held idle', usageUnmeasured: 'not measured', usageSimulated: 'simulated server (not measured)', usageLegend: 'Legend',
    usageSimCell: 'simulated',
    usageDays: 'Day by day', usageDaysSR: 'GPU-hours per day from {from} to {to}: {total} in all, the most {max} on {day}.',
    usageDaysNone: 'GPU-hours per day from {from} to {to}: none.',
    usageTable: 'Show as a table', usageDate: 'Day', usageHours: 'GPU-hours', usageUtilCol: 'Utilisation', usageIdleCol: 'Idle GPU-hours',
    usageBar: '{day}: {h} GPU-hours ({used} used, {idle} idle, {un} not measured)', usageNone: 'nothing yet',
    usageBarSim: '{day}: {h} GPU-hours ({used} used, {idle} idle, {un} not measured, {sim} on a simulated server)',
    usageRunning: '{n} of your VMs hold a GPU now; their time counts up to now.',
    usageRunningOne: 'One of your VMs holds a GPU now; its time counts up to now.',
    usageOfTasks: 'of which tasks: {h} GPU-hours', usageTasksCol: 'Of which tasks',
  },
  'zh-CN': {
    usageTitle: '我的用量',
    usageIntro: '你占用的 GPU 时间，按所占 GPU 份额加权（整块 GPU 一小时为 1 GPU 小时，七分之一块则为七分之一）。日、周（从周一开始）和月按 {tz} 计算，与配额的计算方式一致。',
    usageQuotas: '配额使用情况', usageDay: '今天', usageWeek: '本周', usageMonth: '本月',
    usageOf: '{h} / {q} GPU 小时（{pct}）', usageNoQuota: '{h} GPU 小时（无配额）',
    usageOfSR: '{period}：已用 {h} / {q} GPU 小时，占配额的 {pct}', usageNoQuotaSR: '{period}：{h} GPU 小时，无配额',
    usageUtil: '实际利用率', usageUtilOf: '{period}：在 {m} 个有测量的 GPU 小时中利用率为 {pct}；空闲占用 {idle} GPU 小时。',
    usageUtilUnknown: '{period}：没有测量到利用率（没有 GPU 采样）；占用 {h} GPU 小时。',
    usageUtilSim: '{period}：在模拟 GPU 服务器上占用 {h} GPU 小时，那里没有真实 GPU 测量利用率。',
    usageUtilSimPart: '其中 {s} GPU 小时在模拟 GPU 服务器上，未测量。',
    usageUsed: '已使用', usageIdle: '空闲占用', usageUnmeasured: '未测量', usageSimulated: '模拟服务器（未测量）', usageLegend: '图例',
    usageSimCell: '模拟',
    usageDays: '每日用量', usageDaysSR: '{from} 至 {to} 每日的 GPU 小时：共 {total}，最多的一天是 {day}，{max}。',
    usageDaysNone: '{from} 至 {to} 每日的 GPU 小时：没有。',
    usageTable: '以表格显示', usageDate: '日期', usageHours: 'GPU 小时', usageUtilCol: '利用率', usageIdleCol: '空闲 GPU 小时',
    usageBar: '{day}：{h} GPU 小时（已使用 {used}，空闲 {idle}，未测量 {un}）', usageNone: '暂无',
    usageBarSim: '{day}：{h} GPU 小时（已使用 {used}，空闲 {idle}，未测量 {un}，模拟服务器 {sim}）',
    usageRunning: '你有 {n} 台虚拟机正占用 GPU；它们的时间计算到此刻。',
    usageRunningOne: '你有 1 台虚拟机正占用 GPU；它的时间计算到此刻。',
    usageOfTasks: '其中任务：{h} GPU 小时', usageTasksCol: '其中任务',
  },
});

const num = new Intl.NumberFormat(lang, {maximumFractionDigits: 2});
const pctFmt = new Intl.NumberFormat(lang, {style: 'percent', maximumFractionDigits: 0});
const dayFmt = new Intl.DateTimeFormat(lang, {day: 'numeric', month: 'short', timeZone: 'UTC'});
const h = (x) => num.format(x || 0);
// A period's date, read as the day it names ("2026-12-01"), whatever the
// viewer's zone.
const dayOf = (key) => dayFmt.format(new Date(key + 'T00:00:00Z'));

export default function Usage({session}) {
  const [u, setU] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => { api.usagePeriods().then(setU).catch(setError); }, []);
  return html`<${Header} session=${session} />
  <main id="main" tabindex="-1" class="usage">
    <h1>${t('usageTitle')}</h1>
    <${Problem} error=${error} />
    ${!u && !error && html`<p class="hint" aria-busy="true">…</p>`}
    ${u && html`
      <p class="intro">${t('usageIntro', {tz: u.timezone})}</p>
      ${u.month.running > 0 && html`<p class="notice">${t(u.month.running === 1 ? 'usageRunningOne' : 'usageRunning', {n: u.month.running})}</p>`}
      <section aria-labelledby="quotas-title" class="card">
        <h2 id="quotas-title">${t('usageQuotas')}</h2>
        <${Meter} id="day" period=${t('usageDay')} p=${u.day} />
        <${Meter} id="week" period=${t('usageWeek')} p=${u.week} />
        <${Meter} id="month" period=${t('usageMonth')} p=${u.month} />
      </section>
      <section aria-labelledby="util-title" class="card">
        <h2 id="util-title">${t('usageUtil')}</h2>
        <${Split} id="week" period=${t('usageWeek')} p=${u.week} />
        <${Split} id="month" period=${t('usageMonth')} p=${u.month} />
        <${Legend} simulated=${u.month.simulated_gpu_hours > 0 || u.week.simulated_gpu_hours > 0} />
      </section>
      <section aria-labelledby="days-title" class="card">
        <h2 id="days-title">${t('usageDays')}</h2>
        <${Days} days=${u.days} />
      </section>`}
  </main>`;
}

// Meter: a period's GPU-hours against its quota, as a bar, and how much of
// them tasks' VMs held (task_gpu_hours), when any did.
function Meter({id, period, p}) {
  const q = p.quota_gpu_hours;
  const frac = q ? Math.min(p.gpu_hours / q, 1) : 0;
  const pct = q ? pctFmt.format(p.gpu_hours / q) : '';
  const sr = q ? t('usageOfSR', {period, h: h(p.gpu_hours), q: h(q), pct}) : t('usageNoQuotaSR', {period, h: h(p.gpu_hours)});
  const level = !q ? 'none' : p.gpu_hours >= q ? 'over' : frac >= 0.8 ? 'near' : 'ok';
  return html`<div class="meter" id=${'usage-' + id}>
    <p class="meter-label"><span class="period">${period}</span>
      <span class="amount" aria-hidden="true" id=${'usage-' + id + '-text'}>${q ? t('usageOf', {h: h(p.gpu_hours), q: h(q), pct})
        : t('usageNoQuota', {h: h(p.gpu_hours)})}</span>
      <span class="sr-only">${sr}</span></p>
    ${p.task_gpu_hours > 0 && html`<p class="of-tasks" id=${'usage-' + id + '-tasks'}>${t('usageOfTasks', {h: h(p.task_gpu_hours)})}</p>`}
    ${q ? html`<svg class=${'bar ' + level} viewBox="0 0 100 6" preserveAspectRatio="none" aria-hidden="true" focusable="false">
      <rect class="track" x="0" y="0" width="100" height="6" rx="1" />
      <rect class="fill" x="0" y="0" width=${(frac * 100).toFixed(2)} height="6" rx="1" />
    </svg>` : null}
  </div>`;
}

// parts of a period: used, idle, not measured and simulated GPU-hours (held
// on a simulated GPU server, whose utilisation no GPU measured).
const parts = (p) => {
  const sim = p.simulated_gpu_hours || 0;
  return {used: p.used_gpu_hours || 0, idle: p.idle_gpu_hours || 0, sim,
    un: Math.max((p.gpu_hours || 0) - (p.measured_gpu_hours || 0) - sim, 0)};
};

// Split: a period's GPU-hours split into used, idle and not measured.
function Split({id, period, p}) {
  const {used, idle, un, sim} = parts(p);
  const total = used + idle + un + sim;
  let text = p.utilization == null
    ? t('usageUtilUnknown', {period, h: h(p.gpu_hours)})
    : t('usageUtilOf', {period, pct: pctFmt.format(p.utilization), m: h(p.measured_gpu_hours), idle: h(idle)});
  if (sim > 0 && p.utilization == null && un < 1e-9) text = t('usageUtilSim', {period, h: h(sim)});
  else if (sim > 0) text += ' ' + t('usageUtilSimPart', {s: h(sim)});
  let x = 0;
  const seg = (cls, v) => {
    if (!total || !v) return null;
    const w = (v / total) * 100, r = html`<rect class=${cls} x=${x.toFixed(2)} y="0" width=${w.toFixed(2)} height="6" />`;
    x += w;
    return r;
  };
  return html`<div class="split" id=${'util-' + id}>
    <p>${text}</p>
    <svg class="bar" viewBox="0 0 100 6" preserveAspectRatio="none" aria-hidden="true" focusable="false">
      <rect class="track" x="0" y="0" width="100" height="6" />
      ${seg('used', used)}${seg('idle', idle)}${seg('unmeasured', un)}${seg('simulated', sim)}
    </svg>
  </div>`;
}

function Legend({simulated}) {
  const item = (cls, key) => html`<li><svg viewBox="0 0 10 10" width="12" height="12" aria-hidden="true" focusable="false">
    <rect class=${cls} width="10" height="10" /></svg> ${t(key)}</li>`;
  return html`<ul class="legend" aria-label=${t('usageLegend')}>${item('used', 'usageUsed')}${item('idle', 'usageIdle')}${item('unmeasured', 'usageUnmeasured')}${simulated && item('simulated', 'usageSimulated')}</ul>`;
}

// Days: GPU-hours per day as bars (used, idle, not measured), with their
// words and a table.
function Days({days}) {
  const W = 24, H = 120, top = Math.max(...days.map((d) => d.gpu_hours), 0);
  const scale = top > 0 ? (H - 4) / top : 0;
  const first = days.length ? dayOf(days[0].key) : '', last = days.length ? dayOf(days[days.length - 1].key) : '';
  const most = days.reduce((a, d) => (d.gpu_hours > a.gpu_hours ? d : a), days[0] || {gpu_hours: 0});
  const total = days.reduce((a, d) => a + d.gpu_hours, 0);
  const sr = top > 0
    ? t('usageDaysSR', {from: first, to: last, total: h(total), max: h(most.gpu_hours), day: dayOf(most.key)})
    : t('usageDaysNone', {from: first, to: last});
  const bar = (d, i) => {
    const {used, idle, un, sim} = parts(d);
    let y = H;
    const seg = (cls, v) => {
      const hh = v * scale;
      if (hh <= 0) return null;
      y -= hh;
      return html`<rect class=${cls} x=${i * W + 3} y=${y.toFixed(2)} width=${W - 6} height=${hh.toFixed(2)} />`;
    };
    const words = {day: dayOf(d.key), h: h(d.gpu_hours), used: h(used), idle: h(idle), un: h(un), sim: h(sim)};
    return html`<g><title>${t(sim > 0 ? 'usageBarSim' : 'usageBar', words)}</title>
      <rect class="hit" x=${i * W} y="0" width=${W} height=${H} />
      ${seg('used', used)}${seg('idle', idle)}${seg('unmeasured', un)}${seg('simulated', sim)}
      <text class="tick" x=${i * W + W / 2} y=${H + 14} text-anchor="middle">${d.key.slice(8).replace(/^0/, '')}</text></g>`;
  };
  return html`<figure class="days">
    <svg id="usage-days" viewBox=${`0 0 ${Math.max(days.length, 1) * W} ${H + 18}`} role="img" aria-label=${sr}>
      <line class="axis" x1="0" y1=${H} x2=${days.length * W} y2=${H} />
      ${days.map(bar)}
    </svg>
    <figcaption class="hint">${sr}</figcaption>
    <details>
      <summary>${t('usageTable')}</summary>
      <table class="usage-table" id="usage-table">
        <thead><tr><th scope="col">${t('usageDate')}</th><th scope="col">${t('usageHours')}</th>
          <th scope="col">${t('usageUtilCol')}</th><th scope="col">${t('usageIdleCol')}</th><th scope="col">${t('usageTasksCol')}</th></tr></thead>
        <tbody>${days.map((d) => html`<tr><th scope="row">${dayOf(d.key)}</th><td>${h(d.gpu_hours)}</td>
          <td>${d.utilization == null ? (d.simulated_gpu_hours > 0 ? t('usageSimCell') : t('none')) : pctFmt.format(d.utilization)}</td><td>${h(d.idle_gpu_hours)}</td><td>${h(d.task_gpu_hours)}</td></tr>`)}</tbody>
      </table>
    </details>
  </figure>`;
}
