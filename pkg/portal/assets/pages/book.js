// pages/book.js: /book, a week calendar (days × hours, in the viewer's
// time zone) of the capacity the caller may book for a profile: per slot
// how many VMs are free (GET /v1/reservations/capacity) and the caller's
// bookings (GET /v1/reservations); book a slot, once or weekly, and cancel
// a booking. A refusal is shown in the API's own words. On a phone the
// calendar shows one day at a time. Where the policy offers no booking
// (rules.not_offered) the page says so, and who books instead, with no
// calendar; one the caller may not book shows no calendar either.
import {html, useState, useEffect, useCallback, useRef, useMemo} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t, addWords, lang, gpuWords} from '../i18n.js';
import {Header, Problem, Confirm} from '../ui.js';

addWords({
  en: {
    bookTitle: 'Book ahead',
    bookIntro: 'Book GPU capacity ahead: choose a machine, then a free hour in the calendar. Times are in your time zone ({tz}).',
    bookProfile: 'Machine', bookWeekNav: 'Week', bookPrevWeek: 'Previous week', bookThisWeek: 'This week', bookNextWeek: 'Next week',
    bookWeekOf: 'Week of {from} to {to}', bookDayNav: 'Day', bookCaption: 'Free capacity of {p} from {from} to {to}: choose a slot to book it.',
    bookHour: 'Hour', bookFree: '{n} free', bookFreeMore: '{n}+ free', bookFull: 'full', bookPast: 'past', bookYours: 'yours',
    bookCellFree: '{when}: {free}, book it', bookCellFull: '{when}: full, nothing free', bookCellPast: '{when}: past',
    bookCellYours: '{when}: yours, booked; {n} more free',
    bookRules: 'You may book up to {ahead} ahead, for at most {length} and {vms} VMs at a time.',
    bookRulesNone: 'No limit of the policy binds your bookings; the GPUs do.',
    bookUnavailable: 'No GPU here can give this machine: {why}', bookNoProfiles: 'There is no machine with a GPU you may book.',
    bookDays: '{n} days', bookHours: '{n} h', bookAny: 'any number of',
    bookFormTitle: 'Book {p} from {when}', bookLength: 'Length', bookLengthHint: 'How many hours, from the slot on.',
    bookCount: 'VMs', bookCountHint: 'How many VMs of it (1 to {m}).', bookRepeat: 'Repeat weekly',
    bookWeeks: 'Weeks', bookWeeksHint: 'How many weeks in all, this one included (2 to 52): all are booked, or none.',
    bookNote: 'Note', bookNoteHint: 'What it is for (optional).', bookSubmit: 'Book', bookBooking: 'Booking…',
    bookBooked: 'Booked: {p} from {when}.', bookBookedWeeks: 'Booked: {p} from {when}, weekly for {n} weeks.',
    bookRefused: 'Not booked: {why}',
    bookMine: 'Your bookings', bookNoMine: 'You have no bookings to come.', bookWhen: '{from} to {to}',
    bookWeekly: 'weekly until {until}', bookDaily: 'daily until {until}', bookOnce: 'once', bookFor: 'for {owner}',
    bookVMs: '{n} × {p}', bookCancel: 'Cancel booking', bookCancelOf: 'Cancel booking: {p} from {when}',
    bookConfirmCancel: 'Cancel the booking of {p} from {when}? Every occurrence of it is cancelled.',
    bookConfirmYes: 'Yes, cancel it', bookCancelled: 'Cancelled the booking of {p} from {when}.', bookLoading: 'Loading…',
    bookShowBooking: 'Your booking of {p}: {when}',
    bookNotOffered: 'Booking GPUs ahead is not offered on this server.',
    bookNotOfferedAsk: 'If you need a GPU at a set time, ask an admin of this server{admin}: an admin can book it for you. Until then, ask for a machine when you need it, on GPU machines.',
    bookMayNotAsk: 'You may not book {p} ahead here: only some people or machines may be booked. Ask an admin of this server{admin}, who can book it for you.',
    bookWhyNot: 'The server says: {why}',
  },
  'zh-CN': {
    bookTitle: '预约',
    bookIntro: '提前预约 GPU 资源：先选择机器，再在日历中选择空闲的时段。时间按你的时区（{tz}）显示。',
    bookProfile: '机器', bookWeekNav: '周', bookPrevWeek: '上一周', bookThisWeek: '本周', bookNextWeek: '下一周',
    bookWeekOf: '{from} 至 {to} 这一周', bookDayNav: '日', bookCaption: '{p} 从 {from} 到 {to} 的空闲资源：选择一个时段进行预约。',
    bookHour: '时间', bookFree: '空闲 {n}', bookFreeMore: '空闲 {n}+', bookFull: '已满', bookPast: '已过', bookYours: '你的',
    bookCellFree: '{when}：{free}，点此预约', bookCellFull: '{when}：已满', bookCellPast: '{when}：已过',
    bookCellYours: '{when}：你的预约；另有 {n} 个空闲',
    bookRules: '你最多可提前 {ahead} 预约，每次最长 {length}，最多 {vms} 台虚拟机。',
    bookRulesNone: '策略没有限制你的预约，只受 GPU 数量限制。',
    bookUnavailable: '这里没有 GPU 能提供这台机器：{why}', bookNoProfiles: '没有你可以预约的带 GPU 的机器。',
    bookDays: '{n} 天', bookHours: '{n} 小时', bookAny: '不限数量的',
    bookFormTitle: '预约 {p}，从 {when} 开始', bookLength: '时长', bookLengthHint: '从所选时段开始的小时数。',
    bookCount: '虚拟机数', bookCountHint: '预约几台（1 到 {m}）。', bookRepeat: '每周重复',
    bookWeeks: '周数', bookWeeksHint: '一共几周，包括本周（2 到 52）：要么全部预约成功，要么都不预约。',
    bookNote: '备注', bookNoteHint: '用途（可选）。', bookSubmit: '预约', bookBooking: '正在预约…',
    bookBooked: '已预约：{p}，从 {when} 开始。', bookBookedWeeks: '已预约：{p}，从 {when} 开始，每周一次，共 {n} 周。',
    bookRefused: '未能预约：{why}',
    bookMine: '你的预约', bookNoMine: '你没有即将到来的预约。', bookWhen: '{from} 至 {to}',
    bookWeekly: '每周一次，直到 {until}', bookDaily: '每天一次，直到 {until}', bookOnce: '一次', bookFor: '为 {owner}',
    bookVMs: '{n} × {p}', bookCancel: '取消预约', bookCancelOf: '取消预约：{p}，{when} 开始',
    bookConfirmCancel: '取消 {p} 从 {when} 开始的预约？它的每一次都会被取消。',
    bookConfirmYes: '确定取消', bookCancelled: '已取消 {p} 从 {when} 开始的预约。', bookLoading: '正在加载…',
    bookShowBooking: '你预约的 {p}：{when}',
    bookNotOffered: '本服务器不提供提前预约 GPU。',
    bookNotOfferedAsk: '如果你需要在某个时间使用 GPU，请联系本服务器的管理员{admin}：管理员可以替你预约。在此之前，需要时可在“GPU 机器”中直接申请。',
    bookMayNotAsk: '你不能在这里提前预约 {p}：只有部分人或部分机器可以预约。请联系本服务器的管理员{admin}，管理员可以替你预约。',
    bookWhyNot: '服务器的说明：{why}',
  },
});

const HOUR = 3600 * 1000;
const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
const fmtDay = new Intl.DateTimeFormat(lang, {weekday: 'short', day: 'numeric', month: 'short'});
const fmtDate = new Intl.DateTimeFormat(lang, {day: 'numeric', month: 'short', year: 'numeric'});
const fmtHour = new Intl.DateTimeFormat(lang, {hour: '2-digit', minute: '2-digit'});
const fmtWhen = new Intl.DateTimeFormat(lang, {weekday: 'short', day: 'numeric', month: 'short', hour: '2-digit', minute: '2-digit'});
const dayIndex = {sun: 0, mon: 1, tue: 2, wed: 3, thu: 4, fri: 5, sat: 6};

// mondayOf is the local Monday 00:00 of the week of d.
function mondayOf(d) {
  const x = new Date(d);
  x.setHours(0, 0, 0, 0);
  x.setDate(x.getDate() - ((x.getDay() + 6) % 7));
  return x;
}

function addDays(d, n) {
  const x = new Date(d);
  x.setDate(x.getDate() + n);
  return x;
}

// slotKey names a local day and hour: "2026-12-02 14".
const slotKey = (d) => `${d.getFullYear()}-${d.getMonth() + 1}-${d.getDate()} ${d.getHours()}`;

// occurrences of a reservation that overlap [from, to), from its first
// occurrence and recurrence (weekly on its days, or daily, until).
export function occurrences(r, from, to) {
  const s = new Date(r.start), len = new Date(r.end) - s;
  if (!r.recurrence) return s < to && s.getTime() + len > from ? [{start: s, end: new Date(s.getTime() + len)}] : [];
  const until = new Date(r.recurrence.until);
  const days = (r.recurrence.days || []).map((d) => dayIndex[d]);
  const out = [];
  for (let d = new Date(s); d < to && d < until; d = addDays(d, 1)) {
    if (r.recurrence.freq !== 'daily' && (days.length ? !days.includes(d.getDay()) : d.getDay() !== s.getDay())) continue;
    const end = new Date(d.getTime() + len);
    if (end > from) out.push({start: new Date(d), end});
  }
  return out;
}

const duration = (secs) => (secs % 86400 === 0 ? t('bookDays', {n: secs / 86400}) : t('bookHours', {n: Math.round(secs / 3600)}));

export default function Book({session}) {
  const [profiles, setProfiles] = useState(null);
  const [profile, setProfile] = useState('');
  const [week, setWeek] = useState(() => mondayOf(new Date()));
  const [day, setDay] = useState(() => (new Date().getDay() + 6) % 7);
  const [cap, setCap] = useState(null);
  // offered: whether the policy offers booking ahead (the capacity's
  // rules.not_offered); null until the first answer.
  const [offered, setOffered] = useState(null);
  const [mine, setMine] = useState(null);
  const [error, setError] = useState(null);
  const [said, setSaid] = useState('');
  const [slot, setSlot] = useState(null); // the slot being booked
  const [cancel, setCancel] = useState(null); // the booking being cancelled

  useEffect(() => {
    api.call('GET', '/v1/profiles').then((ps) => {
      const withGPU = ps.filter((p) => p.gpu);
      setProfiles(withGPU);
      if (withGPU.length) setProfile(withGPU[0].name);
    }).catch(setError);
  }, []);

  const weekEnd = useMemo(() => addDays(week, 7), [week]);
  const load = useCallback(async () => {
    if (!profile) return;
    try {
      const [c, rs] = await Promise.all([api.bookingCapacity(profile, week, weekEnd), api.reservations()]);
      setCap(c);
      setOffered(!c.rules.not_offered);
      setMine(rs.items || []);
      setError(null);
    } catch (err) { setError(err); }
  }, [profile, week, weekEnd]);
  useEffect(() => { setCap(null); load(); }, [load]);

  const p = (profiles || []).find((x) => x.name === profile);
  const words = (name) => {
    const q = (profiles || []).find((x) => x.name === name);
    return q ? `${name} (${gpuWords(q.gpu)})` : name;
  };

  const cancelIt = async (r) => {
    setCancel(null);
    try {
      await api.cancelReservation(r.id);
      setSaid(t('bookCancelled', {p: words(r.profile || ''), when: fmtWhen.format(new Date(r.start))}));
      load();
    } catch (err) { setError(err); }
  };

  const booked = (msg) => { setSlot(null); setSaid(msg); load(); };

  return html`<${Header} session=${session} />
  <main id="main" tabindex="-1" class="book">
    <h1>${t('bookTitle')}</h1>
    ${offered !== false && html`<p class="intro">${t('bookIntro', {tz: zone})}</p>`}
    <${Problem} error=${error} />
    <p class="sr-only" role="status" aria-live="polite">${said}</p>
    ${said && html`<p class="notice ok" id="book-said">${said}</p>`}
    ${profiles && profiles.length === 0 && html`<p class="notice">${t('bookNoProfiles')}</p>`}
    ${profiles && profiles.length > 0 && offered === null && !error && html`<p class="hint" aria-busy="true">${t('bookLoading')}</p>`}
    ${offered === false && html`<${NotOffered} mine=${mine} words=${words} onCancel=${setCancel} />`}
    ${profiles && profiles.length > 0 && offered && html`
      <div class="book-controls">
        <label for="book-profile">${t('bookProfile')}
          <select id="book-profile" value=${profile} onChange=${(e) => setProfile(e.target.value)}>
            ${profiles.map((q) => html`<option value=${q.name}>${words(q.name)}</option>`)}
          </select>
        </label>
        <div class="week-nav" role="group" aria-label=${t('bookWeekNav')}>
          <button type="button" class="quiet" id="prev-week" onClick=${() => setWeek(addDays(week, -7))}>${t('bookPrevWeek')}</button>
          <button type="button" class="quiet" id="this-week" onClick=${() => setWeek(mondayOf(new Date()))}>${t('bookThisWeek')}</button>
          <button type="button" class="quiet" id="next-week" onClick=${() => setWeek(addDays(week, 7))}>${t('bookNextWeek')}</button>
        </div>
      </div>
      <h2 id="book-week">${t('bookWeekOf', {from: fmtDate.format(week), to: fmtDate.format(addDays(week, 6))})}</h2>
      ${cap && html`<${Rules} cap=${cap} label=${words(profile)} />`}
      ${!(cap && !cap.rules.may_book) && html`<${DayNav} week=${week} day=${day} setDay=${setDay} />
      <${Calendar} cap=${cap} mine=${mine} profile=${profile} label=${words(profile)} week=${week} weekEnd=${weekEnd} day=${day} setDay=${setDay}
        onBook=${setSlot} onShow=${(r) => document.getElementById('booking-' + r.id)?.focus()} />`}
      <${Mine} mine=${mine} words=${words} onCancel=${setCancel} />`}
    ${slot && p && html`<${BookForm} slot=${slot} p=${p} label=${words(p.name)} cap=${cap} onDone=${booked} onCancel=${() => setSlot(null)} />`}
    ${cancel && html`<${Confirm} text=${t('bookConfirmCancel', {p: words(cancel.profile || ''), when: fmtWhen.format(new Date(cancel.start))})}
      yes=${t('bookConfirmYes')} danger=${true} onYes=${() => cancelIt(cancel)} onNo=${() => setCancel(null)} />`}
  </main>`;
}

// NotOffered: the policy offers no booking ahead (no reservations block):
// say so in words, and who can book instead; no calendar. Bookings an
// admin made for the caller are still listed.
function NotOffered({mine, words, onCancel}) {
  const any = (mine || []).some((r) => (r.next || []).length > 0);
  return html`<div class="notice" id="book-not-offered">
      <p><strong>${t('bookNotOffered')}</strong></p>
      <p>${t('bookNotOfferedAsk')}</p>
    </div>
    ${any && html`<${Mine} mine=${mine} words=${words} onCancel=${onCancel} />`}`;
}

function Rules({cap, label}) {
  const r = cap.rules;
  if (cap.unavailable) return html`<p class="notice error" id="book-unavailable">${t('bookUnavailable', {why: cap.unavailable})}</p>`;
  if (!r.may_book) return html`<div class="notice" id="book-may-not"><p>${t('bookMayNotAsk', {p: label})}</p>
    ${r.why_not && html`<p class="hint">${t('bookWhyNot', {why: r.why_not})}</p>`}</div>`;
  if (!r.max_ahead_seconds && !r.max_length_seconds && !r.max_vms) return html`<p class="hint" id="book-rules">${t('bookRulesNone')}</p>`;
  return html`<p class="hint" id="book-rules">${t('bookRules', {
    ahead: r.max_ahead_seconds ? duration(r.max_ahead_seconds) : '∞',
    length: r.max_length_seconds ? duration(r.max_length_seconds) : '∞',
    vms: r.max_vms || t('bookAny'),
  })}</p>`;
}

// DayNav chooses the day a phone shows (hidden on wider screens).
function DayNav({week, day, setDay}) {
  return html`<div class="day-nav" role="group" aria-label=${t('bookDayNav')}>
    ${[0, 1, 2, 3, 4, 5, 6].map((i) => html`<button type="button" class=${'quiet' + (i === day ? ' chosen' : '')}
      aria-pressed=${i === day} onClick=${() => setDay(i)}>${fmtDay.format(addDays(week, i))}</button>`)}
  </div>`;
}

function Calendar({cap, mine, profile, label, week, weekEnd, day, setDay, onBook, onShow}) {
  const days = [0, 1, 2, 3, 4, 5, 6].map((i) => addDays(week, i));
  const slots = useMemo(() => {
    const m = new Map();
    for (const s of (cap && cap.slots) || []) m.set(slotKey(new Date(s.start)), s);
    return m;
  }, [cap]);
  // The caller's bookings of this profile, by the slots they cover.
  const own = useMemo(() => {
    const m = new Map();
    for (const r of mine || []) {
      if (r.profile !== profile) continue;
      for (const o of occurrences(r, week, weekEnd)) {
        for (let h = new Date(Math.floor(o.start.getTime() / HOUR) * HOUR); h < o.end; h = new Date(h.getTime() + HOUR)) m.set(slotKey(h), r);
      }
    }
    return m;
  }, [mine, profile, week, weekEnd]);
  const most = cap ? cap.most : 0;
  const usable = cap && cap.rules.may_book && !cap.unavailable;
  // One cell is in the tab order; the arrow keys, Home and End move
  // among them (a grid's roving focus), Enter or Space books.
  const [focus, setFocus] = useState(null);
  const moved = useRef(false);
  const first = useMemo(() => {
    for (let i = 0; i < 7; i++) {
      for (let h = 0; h < 24; h++) {
        const at = addDays(week, i);
        at.setHours(h, 0, 0, 0);
        const s = slots.get(slotKey(at));
        if (s && !s.past) return {i, h};
      }
    }
    return {i: 0, h: 0};
  }, [slots, week]);
  const at = focus || first;
  useEffect(() => {
    if (!moved.current) return;
    moved.current = false;
    document.querySelector(`[data-cell="${at.i}-${at.h}"]`)?.focus();
  }, [at.i, at.h]);
  const onKey = (e) => {
    const step = {ArrowUp: [0, -1], ArrowDown: [0, 1], ArrowLeft: [-1, 0], ArrowRight: [1, 0], Home: [0, -24], End: [0, 24]}[e.key];
    if (!step) return;
    e.preventDefault();
    const i = Math.min(6, Math.max(0, at.i + step[0])), h = Math.min(23, Math.max(0, at.h + step[1]));
    if (!document.querySelector(`[data-cell="${i}-${h}"]`)) return;
    moved.current = true;
    setFocus({i, h});
    if (i !== at.i) setDay(i); // a phone shows the day moved to
  };
  const cell = (d, h, i) => {
    const col = ` d${i}${i === day ? ' chosen' : ''}`;
    const when0 = new Date(d);
    when0.setHours(h, 0, 0, 0);
    const key = slotKey(when0);
    const s = slots.get(key);
    if (!s || when0.getHours() !== h) return html`<td class=${"slot none" + col}></td>`; // not in this week, or skipped by a DST change
    const when = fmtWhen.format(when0);
    const tab = at.i === i && at.h === h ? 0 : -1;
    const btn = (label, text, onClick, off) => html`<button type="button" data-slot=${s.start} data-cell=${i + '-' + h} tabindex=${tab}
      aria-label=${label} aria-disabled=${off ? 'true' : undefined} onFocus=${() => setFocus({i, h})}
      onClick=${off ? undefined : onClick}>${text}</button>`;
    // Counted up to most: more may be free, unless most is the rules' limit.
    const free = s.free >= most && most > 0 && !cap.rules.max_vms ? t('bookFreeMore', {n: s.free}) : t('bookFree', {n: s.free});
    const r = own.get(key);
    if (r) return html`<td class=${"slot yours" + col}>${btn(t('bookCellYours', {when, n: s.free}), t('bookYours'), () => onShow(r), false)}</td>`;
    if (s.past) return html`<td class=${"slot past" + col}>${btn(t('bookCellPast', {when}), t('bookPast'), null, true)}</td>`;
    if (s.free === 0) return html`<td class=${"slot full" + col}>${btn(t('bookCellFull', {when}), t('bookFull'), null, true)}</td>`;
    return html`<td class=${"slot free" + col}>${btn(t('bookCellFree', {when, free}), free,
      () => onBook({start: new Date(s.start), free: s.free}), !usable)}</td>`;
  };
  const hours = [...Array(24).keys()];
  return html`<div class="calendar-wrap" aria-busy=${!cap}>
    <table class="calendar" id="calendar">
      <caption class="sr-only">${t('bookCaption', {p: label, from: fmtDate.format(week), to: fmtDate.format(addDays(week, 6))})}</caption>
      <thead><tr><th scope="col">${t('bookHour')}</th>
        ${days.map((d, i) => html`<th scope="col" class=${'day d' + i + (i === day ? ' chosen' : '')}>${fmtDay.format(d)}</th>`)}</tr></thead>
      <tbody onKeyDown=${onKey}>${hours.map((h) => html`<tr>
        <th scope="row">${fmtHour.format(new Date(2000, 0, 1, h))}</th>
        ${days.map((d, i) => cell(d, h, i))}
      </tr>`)}</tbody>
    </table>
    ${!cap && html`<p class="hint">${t('bookLoading')}</p>`}
  </div>`;
}

function Mine({mine, words, onCancel}) {
  const items = (mine || []).filter((r) => (r.next || []).length > 0);
  const occ = (o) => t('bookWhen', {from: fmtWhen.format(new Date(o.start)), to: fmtHour.format(new Date(o.end))});
  return html`<section class="mine" aria-labelledby="mine-title">
    <h2 id="mine-title">${t('bookMine')}</h2>
    ${mine && items.length === 0 && html`<p class="hint">${t('bookNoMine')}</p>`}
    <ul class="bookings">
      ${items.map((r) => {
        const when = fmtWhen.format(new Date(r.start));
        const rep = !r.recurrence ? t('bookOnce')
          : t(r.recurrence.freq === 'daily' ? 'bookDaily' : 'bookWeekly', {until: fmtDate.format(new Date(new Date(r.recurrence.until).getTime() - 1))});
        return html`<li class="card booking" id=${'booking-' + r.id} tabindex="-1" aria-label=${t('bookShowBooking', {p: words(r.profile || ''), when: occ(r.next[0])})}>
          <p class="what"><strong>${t('bookVMs', {n: r.count, p: words(r.profile || (r.gpu && r.gpu.type) || '')})}</strong>
            ${r.owner.startsWith('group:') ? ' ' + t('bookFor', {owner: r.owner.slice(6)}) : ''}</p>
          <p class="when">${occ(r.next[0])} · ${rep}</p>
          ${r.note && html`<p class="hint">${r.note}</p>`}
          <button type="button" class="danger" aria-label=${t('bookCancelOf', {p: words(r.profile || ''), when})}
            onClick=${() => onCancel(r)}>${t('bookCancel')}</button>
        </li>`;
      })}
    </ul>
  </section>`;
}

function BookForm({slot, p, label, cap, onDone, onCancel}) {
  const ref = useRef(null);
  const [busy, setBusy] = useState(false);
  const [refused, setRefused] = useState('');
  const [repeat, setRepeat] = useState(false);
  useEffect(() => { const d = ref.current; d.showModal(); return () => d.open && d.close(); }, []);
  const rules = cap ? cap.rules : {};
  const maxLen = Math.max(1, Math.floor((rules.max_length_seconds || 24 * 3600) / 3600));
  const maxCount = Math.max(1, Math.min(slot.free, rules.max_vms || slot.free));
  const when = fmtWhen.format(slot.start);
  const submit = async (e) => {
    e.preventDefault();
    const f = e.target.elements;
    const hours = Number(f.hours.value), weeks = repeat ? Number(f.weeks.value) : 1;
    const end = new Date(slot.start.getTime() + hours * HOUR);
    // The hour under way is booked from now on.
    const start = slot.start < new Date() ? new Date() : slot.start;
    const body = {profile: p.name, count: Number(f.count.value), start: start.toISOString(), end: end.toISOString()};
    if (f.note.value.trim()) body.note = f.note.value.trim();
    if (weeks > 1) {
      // No occurrence starts at or after until: half a day after the
      // last week's start, whatever the daylight-saving shifts.
      const until = addDays(slot.start, 7 * (weeks - 1));
      body.recurrence = {freq: 'weekly', until: new Date(until.getTime() + 12 * HOUR).toISOString()};
    }
    setBusy(true); setRefused('');
    try {
      await api.book(body);
      onDone(weeks > 1 ? t('bookBookedWeeks', {p: label, when, n: weeks}) : t('bookBooked', {p: label, when}));
    } catch (err) {
      setRefused(err.message);
      setBusy(false);
    }
  };
  return html`<dialog ref=${ref} class="book-form" aria-labelledby="book-form-title" onCancel=${onCancel}>
    <form onSubmit=${submit}>
      <h2 id="book-form-title">${t('bookFormTitle', {p: label, when})}</h2>
      <label for="book-length">${t('bookLength')}</label>
      <select id="book-length" name="hours" aria-describedby="book-length-hint">
        ${[...Array(maxLen).keys()].map((i) => html`<option value=${i + 1}>${t('bookHours', {n: i + 1})}</option>`)}
      </select>
      <p class="hint" id="book-length-hint">${t('bookLengthHint')}</p>
      <label for="book-count">${t('bookCount')}</label>
      <input id="book-count" name="count" type="number" min="1" max=${maxCount} value="1" required aria-describedby="book-count-hint" />
      <p class="hint" id="book-count-hint">${t('bookCountHint', {m: maxCount})}</p>
      <label class="check" for="book-repeat"><input id="book-repeat" type="checkbox" checked=${repeat}
        onChange=${(e) => setRepeat(e.target.checked)} /> ${t('bookRepeat')}</label>
      ${repeat && html`<label for="book-weeks">${t('bookWeeks')}</label>
        <input id="book-weeks" name="weeks" type="number" min="2" max="52" value="4" required aria-describedby="book-weeks-hint" />
        <p class="hint" id="book-weeks-hint">${t('bookWeeksHint')}</p>`}
      <label for="book-note">${t('bookNote')}</label>
      <input id="book-note" name="note" maxlength="500" autocomplete="off" aria-describedby="book-note-hint" />
      <p class="hint" id="book-note-hint">${t('bookNoteHint')}</p>
      ${refused && html`<p class="notice error" role="alert" id="book-refused">${t('bookRefused', {why: refused})}</p>`}
      <div class="buttons">
        <button type="submit" id="book-submit" disabled=${busy}>${busy ? t('bookBooking') : t('bookSubmit')}</button>
        <button type="button" class="quiet" onClick=${onCancel}>${t('cancel')}</button>
      </div>
    </form>
  </dialog>`;
}
