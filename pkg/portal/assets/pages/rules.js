// pages/rules.js: /rules, the rules of sharing in plain language, as
// GET /v1/rules writes them from the policy in force (pkg/rules): a part
// "for you" (groups, limits, priority, booking), then one section per
// heading. Time windows are shown in the viewer's time zone, from the
// occurrences of this week the API gives as absolute times, with the
// policy's own times beside them when the zones differ.
import {html, useState, useEffect} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t, addWords, lang, fmtBytes} from '../i18n.js';
import {Header, Problem} from '../ui.js';

addWords({
  en: {
    rulesTitle: 'The rules', rulesIntro: 'How this server is shared, written from the rules in force. Ask your admin{admin} about anything unclear.',
    rulesContents: 'Sections', rulesZone: 'Times are shown in your time zone, {zone}.',
    rulesZoneSame: 'Times are in {zone}, your time zone and the rules\'.',
    youGroups: 'Your groups', youNoGroup: 'none', youLimits: 'Your limits', youNoLimit: 'no limit',
    youPriority: 'Priority', youPreemptible: '{n}, preemptible', youMachines: 'Machines you may ask for',
    youBooking: 'Booking ahead', youMayBook: 'allowed', youMayNotBook: 'not allowed',
    q_vms: '{n} VMs at once', q_gpus: '{n} whole GPUs at once', q_slices: '{n} slices at once',
    q_gpu_memory: '{v} of GPU memory at once', q_gpu_hours_per_day: '{n} GPU-hours a day',
    q_gpu_hours_per_week: '{n} GPU-hours a week', q_gpu_hours_per_month: '{n} GPU-hours a month',
    q_vms_1: '1 VM at once', q_gpus_1: '1 whole GPU at once', q_slices_1: '1 slice at once',
    q_gpu_hours_per_day_1: '1 GPU-hour a day', q_gpu_hours_per_week_1: '1 GPU-hour a week', q_gpu_hours_per_month_1: '1 GPU-hour a month',
    winLocal: 'Window “{name}”, {when} (your time): {rule}.', winPolicy: 'In the rules\' time zone ({zone}): {when}.',
    winNone: 'Window “{name}” does not occur this week: {rule}.',
    everyDay: 'every day', dayRange: '{a} to {b}', sameDay: '{days}, {from} to {to}', nextDay: '{days}, {from} to {to} the next day',
    span: 'from {fromDay} {from} to {toDay} {to}', allWeek: 'at every hour of the week',
  },
  'zh-CN': {
    rulesTitle: '使用规则', rulesIntro: '本服务器如何共享，根据当前生效的规则写成。有不清楚的地方请询问管理员{admin}。',
    rulesContents: '目录', rulesZone: '时间按你的时区 {zone} 显示。',
    rulesZoneSame: '时间按 {zone} 显示，即你的时区，也是规则的时区。',
    youGroups: '你所在的组', youNoGroup: '无', youLimits: '你的限额', youNoLimit: '不限',
    youPriority: '优先级', youPreemptible: '{n}，可被抢占', youMachines: '你可以申请的机器',
    youBooking: '提前预约', youMayBook: '可以', youMayNotBook: '不可以',
    q_vms: '同时 {n} 台虚拟机', q_gpus: '同时 {n} 块整块 GPU', q_slices: '同时 {n} 个切片',
    q_gpu_memory: '同时 {v} GPU 显存', q_gpu_hours_per_day: '每天 {n} GPU 小时',
    q_gpu_hours_per_week: '每周 {n} GPU 小时', q_gpu_hours_per_month: '每月 {n} GPU 小时',
    q_vms_1: '同时 1 台虚拟机', q_gpus_1: '同时 1 块整块 GPU', q_slices_1: '同时 1 个切片',
    q_gpu_hours_per_day_1: '每天 1 GPU 小时', q_gpu_hours_per_week_1: '每周 1 GPU 小时', q_gpu_hours_per_month_1: '每月 1 GPU 小时',
    winLocal: '窗口“{name}”，你的时间{when}：{rule}。', winPolicy: '按规则的时区（{zone}）：{when}。',
    winNone: '窗口“{name}”本周不出现：{rule}。',
    everyDay: '每天', dayRange: '{a}至{b}', sameDay: '{days} {from} 至 {to}', nextDay: '{days} {from} 至次日 {to}',
    span: '{fromDay} {from} 至{toDay} {to}', allWeek: '全周每个小时',
  },
});

// viewerZone is the browser's IANA time zone.
export const viewerZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';

// dayName of a weekday, Monday 0, in the page's language.
const dayFmt = new Intl.DateTimeFormat(lang, {weekday: lang === 'zh-CN' ? 'short' : 'long', timeZone: 'UTC'});
const dayName = (d) => dayFmt.format(new Date(Date.UTC(2024, 0, 1 + d))); // 2024-01-01 was a Monday
const listFmt = new Intl.ListFormat(lang, {type: 'conjunction'});

const pad = (n) => String(n).padStart(2, '0');
const hm = (d) => pad(d.getHours()) + ':' + pad(d.getMinutes());
const weekday = (d) => (d.getDay() + 6) % 7;
// localDays is how many midnights of the viewer's zone lie between a and b.
const localDays = (a, b) => Math.round((new Date(b.getFullYear(), b.getMonth(), b.getDate()) -
  new Date(a.getFullYear(), a.getMonth(), a.getDate())) / 86400000);

// daysWords writes a set of weekdays (Monday 0) as "Monday to Friday",
// "Saturday and Sunday" or "every day".
function daysWords(days) {
  const set = new Set(days);
  if (set.size === 7) return t('everyDay');
  const first = [...set].find((d) => !set.has((d + 6) % 7));
  const parts = [];
  for (let k = 0; k < 7; k++) {
    const d = (first + k) % 7;
    if (!set.has(d) || set.has((d + 6) % 7)) continue; // not the start of a run
    let n = 1;
    while (n < 7 && set.has((d + n) % 7)) n++;
    if (n >= 3) parts.push(t('dayRange', {a: dayName(d), b: dayName((d + n - 1) % 7)}));
    else for (let i = 0; i < n; i++) parts.push(dayName((d + i) % 7));
  }
  return listFmt.format(parts);
}

// localWhen writes a window's occurrences of this week in the viewer's
// time zone: those with the same local hours are grouped by weekday.
export function localWhen(occurrences) {
  const groups = new Map();
  const spans = [];
  for (const o of occurrences) {
    const a = new Date(o.start), b = new Date(o.end);
    const days = localDays(a, b);
    if (b - a >= 7 * 24 * 3600e3) {
      spans.push(t('allWeek'));
      continue;
    }
    if (days > 1) {
      spans.push(t('span', {fromDay: dayName(weekday(a)), from: hm(a), toDay: dayName(weekday(b)), to: hm(b)}));
      continue;
    }
    const key = hm(a) + '|' + hm(b) + '|' + days;
    if (!groups.has(key)) groups.set(key, {from: hm(a), to: hm(b), next: days === 1, days: []});
    groups.get(key).days.push(weekday(a));
  }
  const parts = [...groups.values()].map((g) => t(g.next ? 'nextDay' : 'sameDay', {days: daysWords(g.days), from: g.from, to: g.to}));
  return parts.concat(spans).join(lang === 'zh-CN' ? '；' : '; ');
}

function number(f) { return String(Math.round(f * 100) / 100); }

// quotaWords writes one of the caller's limits (a fact of you.quota).
function quotaWords(f) {
  const name = f.field.replace(/^quota\./, '');
  const one = f.number === 1 && f.unit !== 'bytes' ? '_1' : '';
  return t('q_' + name + one, {n: number(f.number), v: f.unit === 'bytes' ? fmtBytes(f.number) : ''});
}

function ForYou({doc, section}) {
  const y = doc.you;
  return html`<section class="card rules-you" aria-labelledby="rules-you">
    <h2 id="rules-you">${section ? section.title : t('youLimits')}</h2>
    <dl class="facts">
      <div><dt>${t('youGroups')}</dt><dd>${y.groups.length ? y.groups.join(', ') : t('youNoGroup')}</dd></div>
      <div><dt>${t('youLimits')}</dt><dd>${y.quota.length
        ? html`<ul class="limits">${y.quota.map((f) => html`<li key=${f.field}>${quotaWords(f)}</li>`)}</ul>`
        : t('youNoLimit')}</dd></div>
      <div><dt>${t('youPriority')}</dt><dd>${y.preemptible ? t('youPreemptible', {n: y.priority}) : y.priority}</dd></div>
      <div><dt>${t('youMachines')}</dt><dd>${y.profiles.length ? y.profiles.join(', ') : t('youNoGroup')}</dd></div>
      <div><dt>${t('youBooking')}</dt><dd>${y.may_book ? html`<a href="/book">${t('youMayBook')}</a>` : t('youMayNotBook')}</dd></div>
    </dl>
    ${section && html`<ul class="sentences">${section.sentences.map((s, i) => html`<li key=${i}>${s.text}</li>`)}</ul>`}
  </section>`;
}

function Sentence({s, zone}) {
  const w = s.window;
  if (!w) return html`<li>${s.text}</li>`;
  if (!w.this_week.length) return html`<li class="window">${t('winNone', {name: w.name, rule: w.rule})}</li>`;
  return html`<li class="window" data-window=${w.name}>
    ${t('winLocal', {name: w.name, when: localWhen(w.this_week), rule: w.rule})}
    ${w.zone !== zone && html`<span class="policy-time">${t('winPolicy', {zone: w.zone, when: w.when})}</span>`}
  </li>`;
}

export default function Rules({session}) {
  const [doc, setDoc] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => { api.getRules(lang).then(setDoc).catch(setError); }, []);
  const zone = viewerZone();
  const you = doc && doc.sections.find((s) => s.id === 'you');
  const rest = doc ? doc.sections.filter((s) => s.id !== 'you') : [];
  return html`<${Header} session=${session} />
  <main id="main" tabindex="-1" class="rules" aria-busy=${doc === null && !error}>
    <h1>${t('rulesTitle')}</h1>
    <p class="intro">${t('rulesIntro')}</p>
    <${Problem} error=${error} />
    ${doc && html`
      <p class="zone" id="rules-zone">${doc.timezone === zone ? t('rulesZoneSame', {zone}) : t('rulesZone', {zone})}</p>
      <nav class="toc" aria-label=${t('rulesContents')}>
        <a href="#rules-you">${you ? you.title : t('youLimits')}</a>
        ${rest.map((s) => html`<a key=${s.id} href=${'#rules-' + s.id}>${s.title}</a>`)}
      </nav>
      <${ForYou} doc=${doc} section=${you} />
      ${rest.map((s) => html`<section key=${s.id} class="card rules-section" id=${'section-' + s.id} aria-labelledby=${'rules-' + s.id}>
        <h2 id=${'rules-' + s.id}>${s.title}</h2>
        <ul class="sentences">${s.sentences.map((x, i) => html`<${Sentence} key=${i} s=${x} zone=${zone} />`)}</ul>
      </section>`)}`}
  </main>`;
}
