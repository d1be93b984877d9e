/* dcm-status dashboard: plain JavaScript, no build step, nothing fetched from the internet.
 *
 * Every API URL is relative ("v1/summary", not "/v1/summary"): the page works at any base path,
 * e.g. behind `gcloud run services proxy`. Views are hash routes:
 *   #/                                   the fleet at a glance, the live feed, the resource table
 *   #/resources?provider=aws&q=vm-       the same, scrolled to the table, with these filters
 *   #/resource/PROVIDER/TYPE/ID          one resource (ID percent-encoded): state, timeline, history
 *
 * Live: one EventSource on v1/changes/stream, started from the nextCursor of v1/changes?last=20 so
 * nothing committed between page load and stream start is lost. A change can arrive twice (live,
 * then again from the settled feed after a reconnect): changes are deduplicated by id. Late
 * changes are history, not the current state: they are shown in the feed and move nothing else.
 * The fleet summary and the pipeline's accounting are snapshots the platform computes on a schedule
 * (v1/summary, v1/stats: `asOf`, `everySeconds`): the page shows their "as of" time and reads each again
 * only once the next one is due, never faster than the snapshot moves. Between snapshots the summary's
 * counts move locally with each change committed after its `asOf` (those are not in it); a newer snapshot
 * replaces them, the changes after its own `asOf` applied again on top. The other aggregates (dead
 * letters, callbacks, the table's counts) are re-read (debounced) to correct drift.
 * A stream the API refuses (429: too many streams open on its instance or for this caller; 503)
 * falls back to polling: the changes after the cursor are read from v1/changes, then the stream is
 * tried again, with back-off (1 s doubling to 30 s); the live badge says "polling" meanwhile.
 */
'use strict';

(function () {
  const FEED_SIZE = 20;            // changes shown in the feed
  const SEEN_MAX = 2000;           // change ids remembered for deduplication
  const REFRESH_MIN_MS = 5000;     // aggregates re-read at most this often while changes flow
  const REFRESH_IDLE_MS = 30000;   // ... and this often anyway (dead letters move without changes)
  const SNAPSHOT_SLACK_MS = 2000;  // a snapshot is read this long after the next one is due (the sweep's tick)
  const PAGE_SIZE = 50;
  const HISTORY_PAGE = 25;
  const TIMELINE_MAX = 500;        // history entries drawn on the timeline (the API's largest page)
  const SEARCH_DEBOUNCE_MS = 300;
  const RETRY_MAX_MS = 30000;
  const POLL_LIMIT = 200;          // changes read per poll while the stream is refused
  const LABEL_PATTERN = /^(tenant|region|environment):.+$/;

  // ---- status families and colours --------------------------------------------------------
  const FAMILIES = ['good', 'busy', 'bad', 'unknown', 'off'];  // the order statuses are drawn in
  const FAMILY_NAMES = { good: 'up', busy: 'in progress', bad: 'failed / degraded', unknown: 'unknown', off: 'stopped / deleted' };
  const STATUS = {
    RUNNING: ['good', '#15803d'], ACTIVE: ['good', '#166534'], READY: ['good', '#16a34a'], AVAILABLE: ['good', '#4d9f63'],
    PROVISIONING: ['busy', '#b45309'], PENDING: ['busy', '#d97706'], CREATING: ['busy', '#c2680c'],
    PROGRESSING: ['busy', '#a16207'], UPDATING: ['busy', '#ca8a04'], STOPPING: ['busy', '#92400e'], DELETING: ['busy', '#78350f'],
    FAILED: ['bad', '#b91c1c'], DEGRADED: ['bad', '#e35d5d'], UNAVAILABLE: ['bad', '#7f1d1d'],
    UNKNOWN: ['unknown', '#7c3aed'],
    STOPPED: ['off', '#6b7280'], PAUSED: ['off', '#9ca3af'], SUCCEEDED: ['off', '#4b5563'], DELETED: ['off', '#c3c8d0'],
  };
  const ORDER = Object.keys(STATUS);
  const family = (s) => (STATUS[s] ? STATUS[s][0] : 'unknown');
  const colour = (s) => (STATUS[s] ? STATUS[s][1] : '#a78bfa');
  const byStatusOrder = (a, b) => {
    const ia = ORDER.indexOf(a), ib = ORDER.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || (a < b ? -1 : a > b ? 1 : 0);
  };
  function inkOn(hex) {  // dark or light text on a fill, whichever reads better
    const n = parseInt(hex.slice(1), 16);
    const [r, g, b] = [n >> 16, (n >> 8) & 255, n & 255].map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    });
    const l = 0.2126 * r + 0.7152 * g + 0.0722 * b;  // relative luminance; #1b2330 text is 0.016
    return (l + 0.05) / 0.066 > 1.05 / (l + 0.05) ? 'dark' : 'light';  // the higher contrast ratio
  }

  // ---- DOM helpers (never innerHTML with data) ------------------------------------------------
  const $ = (id) => document.getElementById(id);
  function build(make, tag, attrs, children) {
    const e = make(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k === 'class') e.setAttribute('class', v);
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c != null && c !== false) e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }
  const h = (tag, attrs, ...children) => build((t) => document.createElement(t), tag, attrs, children);
  const svg = (tag, attrs, ...children) =>
    build((t) => document.createElementNS('http://www.w3.org/2000/svg', t), tag, attrs, children);
  const fmt = new Intl.NumberFormat('en-US');
  const num = (n) => fmt.format(n || 0);
  const pct = (x) => `${Math.round(x * 10000) / 100}%`;
  function flash(e) {
    if (!e) return;
    e.classList.remove('flash');
    void e.offsetWidth;  // restart the animation
    e.classList.add('flash');
  }
  function debounce(fn, ms) {
    let t = null;
    return (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); };
  }

  // ---- times -------------------------------------------------------------------------------
  const clockFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
  const dayFmt = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', hour12: false });
  const fullFmt = new Intl.DateTimeFormat(undefined, {
    year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false,
  });
  const parseTime = (iso) => (iso ? new Date(iso) : null);
  function clock(iso) {
    const d = parseTime(iso);
    if (!d || isNaN(d)) return iso || '';
    return d.toDateString() === new Date().toDateString() ? clockFmt.format(d) : dayFmt.format(d);
  }
  function full(iso) {
    const d = parseTime(iso);
    return !d || isNaN(d) ? iso || '' : `${fullFmt.format(d)} (${iso})`;
  }
  function ago(iso) {
    const d = parseTime(iso);
    if (!d || isNaN(d)) return '';
    const s = Math.round((Date.now() - d.getTime()) / 1000);
    if (s < -5) return `in ${duration(-s * 1000)}`;
    if (s < 5) return 'just now';
    return `${duration(s * 1000)} ago`;
  }
  function duration(ms) {
    const s = Math.round(ms / 1000);
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)} min`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }
  const when = (iso) => h('span', { 'data-ago': iso || '', title: full(iso) }, iso ? ago(iso) : '–');

  // ---- the API -----------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, title, detail, url) {
      super(detail);
      Object.assign(this, { status, title, detail, url });
    }
  }
  async function api(path, params) {
    return (await request(path, params)).body;
  }
  // Every call the page makes is a read, safe to repeat: an answer that says "try again" (the network, 429, 502,
  // 503, 504) is tried again after a pause (its Retry-After when it names one, at most 10 s), up to RETRIES
  // times, before the banner says so. Without it one busy moment left a resource page on "No timeline."
  const RETRIES = 3;
  const TRANSIENT = new Set([0, 429, 502, 503, 504]);
  const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  function retryDelay(response, attempt) {
    const named = Number((response && response.headers.get('Retry-After')) || NaN);
    return Math.min(10_000, Number.isFinite(named) && named >= 0 ? named * 1000 : 500 * 2 ** attempt);
  }
  // The answer and the server's Date header (ms since the epoch; NaN without one).
  async function request(path, params) {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v != null && v !== '') query.set(k, v);
    const url = path + (query.toString() ? `?${query}` : '');
    for (let attempt = 0; ; attempt += 1) {
      let response = null;
      try {
        response = await fetch(url, { headers: { Accept: 'application/json' }, cache: 'no-store' });
      } catch (e) {
        if (attempt >= RETRIES) throw new ApiError(0, 'The API cannot be reached', `${url}: ${e.message}`, url);
      }
      if (response && (response.ok || !TRANSIENT.has(response.status) || attempt >= RETRIES)) return answer(url, response);
      await pause(retryDelay(response, attempt));
    }
  }
  async function answer(url, response) {
    const text = await response.text();
    let body = null;
    try { body = JSON.parse(text); } catch (_) { /* not JSON: said below */ }
    if (!response.ok) {
      const detail = (body && body.detail) || text.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim().slice(0, 300);
      throw new ApiError(response.status, (body && body.title) || response.statusText || 'Error',
        detail || `HTTP ${response.status}`, url);
    }
    if (body === null) throw new ApiError(response.status, 'Unexpected answer', `${url} did not answer JSON`, url);
    return { body, date: Date.parse(response.headers.get('Date') || '') };
  }
  const resourcePath = (provider, type, id) =>
    `v1/resources/${encodeURIComponent(provider)}/${encodeURIComponent(type)}/${encodeURIComponent(id)}`;
  const resourceHref = (r) =>
    `#/resource/${encodeURIComponent(r.provider)}/${encodeURIComponent(r.resourceType)}/${encodeURIComponent(r.resourceId)}`;

  // ---- the error banner --------------------------------------------------------------------
  // One line per failing part of the page; a part that loads again takes its line away.
  const errors = new Map();
  function showError(err, what) {
    const e = err instanceof ApiError ? err : new ApiError(0, 'Error', String((err && err.message) || err), '');
    const status = e.status ? ` (${e.status})` : '';
    errors.delete(what || '');
    errors.set(what || '', `${what ? what + ': ' : ''}${e.title}${status}: ${e.detail}`);
    while (errors.size > 4) errors.delete(errors.keys().next().value);
    renderErrors();
  }
  function loaded(what) {
    if (errors.delete(what)) renderErrors();
  }
  function renderErrors() {
    $('banner-text').textContent = [...errors.values()].reverse().join('\n');
    $('banner').hidden = errors.size === 0;
  }
  function clearError() { errors.clear(); renderErrors(); }

  // ---- state -------------------------------------------------------------------------------
  const S = {
    summary: null, dead: null, stats: null, callbacks: null,
    seen: new Set(), seenOrder: [],
    cursor: null, es: null, retryDelay: 1000, retryMax: RETRY_MAX_MS, retryTimer: null,
    changesSeen: 0, refreshTimer: null, lastRefresh: 0,
    pending: [],  // changes committed after the summary's asOf, moved into its counts locally
    snapshotTimers: {}, snapshotDue: {}, snapshotFailed: {},
    view: null,
  };
  const T = {  // the resource table
    filters: { provider: '', type: '', status: '', label: '', q: '', sort: 'key' },
    tokens: [null], next: null, total: null, counts: null, seq: 0, countSeq: 0,
  };
  const R = { key: null, tokens: [null], next: null, at: null, seq: 0 };  // the resource page

  // ---- the fleet at a glance ---------------------------------------------------------------
  function renderSummary(changed) {
    const sm = S.summary;
    if (!sm) return;
    $('kpi-total').textContent = num(sm.total);
    $('kpi-total').dataset.value = sm.total;
    const fams = Object.fromEntries(FAMILIES.map((f) => [f, 0]));
    for (const counts of Object.values(sm.byType)) {
      for (const [s, n] of Object.entries(counts)) fams[family(s)] += n;
    }
    for (const f of FAMILIES) {
      const e = document.querySelector(`[data-family="${f}"]`);
      e.textContent = num(fams[f]);
      e.dataset.value = fams[f];
      if (sm.total) e.append(h('span', { class: 'pct' }, `${Math.round((100 * fams[f]) / sm.total)}%`));
    }
    renderFleet(changed || new Set());
    renderProviders();
    fillFilterOptions();
  }

  function renderFleet(changed) {
    const types = Object.keys(S.summary.byType).sort();
    const box = $('fleet');
    if (!types.length) {
      box.replaceChildren(h('p', { class: 'empty' }, 'No resource yet: nothing has been reported.'));
      $('legend').replaceChildren();
      return;
    }
    const totals = Object.fromEntries(types.map((t) => [t, Object.values(S.summary.byType[t]).reduce((a, b) => a + b, 0)]));
    const max = Math.max(1, ...Object.values(totals));
    const present = new Set();
    const rows = types.map((t) => {
      const counts = S.summary.byType[t];
      const statuses = Object.keys(counts).sort(byStatusOrder);
      let x = 0;
      const segs = [];
      for (const s of statuses) {
        const n = counts[s];
        if (!n) continue;
        present.add(s);
        const w = n / max;
        segs.push(svg('rect', { x: pct(x), y: 0, width: pct(w), height: 22, fill: colour(s), stroke: '#fff', 'stroke-width': 1, 'data-status': s },
          svg('title', {}, `${t} ${s}: ${n}`)));
        if (w * 100 > 3.5) {
          segs.push(svg('text', { x: pct(x + w / 2), y: 15, 'text-anchor': 'middle', class: `seg-label ${inkOn(colour(s)) === 'dark' ? 'dark' : ''}` }, num(n)));
        }
        x += w;
      }
      const label = statuses.map((s) => `${s} ${counts[s]}`).join(', ');
      const chips = statuses.map((s) => {
        const a = h('a', {
          class: `chip${counts[s] ? '' : ' zero'}`, href: `#/resources?${new URLSearchParams({ type: t, status: s })}`,
          'data-count': `${t}:${s}`, 'data-value': counts[s], title: `Show the ${t} resources that are ${s}`,
        }, h('i', { class: 'sw', style: `background:${colour(s)}` }), s, ' ', h('b', {}, num(counts[s])));
        if (changed.has(`${t}:${s}`)) flash(a);
        return a;
      });
      return h('div', { class: 'fleet-row', 'data-type': t },
        h('div', { class: 'fleet-type' }, h('a', { href: `#/resources?type=${encodeURIComponent(t)}` }, t)),
        svg('svg', { role: 'img', 'aria-label': `${t}: ${label}`, preserveAspectRatio: 'none' }, segs),
        h('div', { class: 'fleet-total', 'data-count': `${t}:*`, 'data-value': totals[t] }, num(totals[t])),
        h('div', { class: 'chips' }, chips));
    });
    box.replaceChildren(...rows);
    const legend = FAMILIES.map((f) => {
      const inFamily = [...present].filter((s) => family(s) === f).sort(byStatusOrder);
      if (!inFamily.length) return null;
      return h('span', { class: 'legend-group' }, h('strong', {}, FAMILY_NAMES[f] + ':'),
        inFamily.map((s) => h('span', { class: 'legend-group' }, h('i', { class: 'sw', style: `background:${colour(s)}` }), s)));
    });
    $('legend').replaceChildren(...legend.filter(Boolean));
  }

  function bars(items, fill, countPrefix, hrefOf) {
    if (!items.length) return null;
    const max = Math.max(1, ...items.map(([, n]) => n));
    return h('div', { class: 'bars' }, items.map(([name, n]) => [
      h('span', { class: 'lbl' }, hrefOf ? h('a', { href: hrefOf(name) }, name) : name),
      svg('svg', { 'aria-hidden': 'true', preserveAspectRatio: 'none' },
        svg('rect', { x: 0, y: 1, width: pct(n / max), height: 12, rx: 2, fill })),
      h('span', { class: 'num', 'data-count': `${countPrefix}:${name}`, 'data-value': n }, num(n)),
    ]));
  }

  function renderProviders() {
    const items = Object.entries(S.summary.byProvider).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    // A provider silent as a whole is one alarm here, however many of its resources went UNKNOWN.
    const silent = (S.summary.silentProviders || []).map((p) => h('p', { class: 'silent', role: 'status',
      'data-testid': `silent-${p.provider}` }, h('strong', {}, p.provider), ' silent: nothing reported since ',
      when(p.lastSeenAt), ' (deadline passed ', when(p.since), ')'));
    $('providers').replaceChildren(...silent, bars(items, '#3b6fd1', 'provider',
      (p) => `#/resources?provider=${encodeURIComponent(p)}`) || h('p', { class: 'empty' }, 'No resource yet.'));
  }

  function renderDead() {
    const d = S.dead;
    if (!d) return;
    $('kpi-dead').textContent = num(d.total);
    $('kpi-dead').dataset.value = d.total;
    const items = Object.entries(d.byReason).filter(([, n]) => n).sort((a, b) => b[1] - a[1]);
    const parts = [bars(items, '#c0392b', 'deadletter') || h('p', { class: 'empty' }, 'No dead letter. Nothing failed.')];
    if (d.groups && d.groups.length) {
      parts.push(h('div', { class: 'groups' }, h('strong', {}, `Latest groups`),
        h('span', { class: 'muted' }, ` (of the ${num(d.groupsOf)} latest entries)`),
        h('ol', {}, d.groups.slice(0, 5).map((g) => h('li', {},
          h('code', {}, g.reason), g.provider ? ` · ${g.provider}` : '', ` · ${g.occurrences}× (${g.open} open) · `,
          when(g.lastSeen), h('br'), h('span', { class: 'muted' }, g.message))))));
    }
    $('deadletters').replaceChildren(...parts);
  }

  function renderStats() {
    const st = S.stats;
    if (!st) return;
    $('stats-window').textContent = [st.windowDays ? `last ${st.windowDays} days` : '',
      st.asOf ? `as of ${clock(st.asOf)}${st.outdated ? ' (outdated)' : ''}` : ''].filter(Boolean).join(', ');
    $('stats-window').dataset.asOf = st.asOf || '';
    $('stats-window').title = st.asOf ? `Counted as of ${full(st.asOf)}; the platform counts again every ${st.everySeconds} s` : '';
    const parts = [['applied', '#15803d'], ['unchanged', '#7fa88c'], ['duplicate', '#9ca3af'], ['stale', '#d97706'], ['deadlettered', '#b91c1c']];
    const accounted = parts.reduce((a, [k]) => a + (st[k] || 0), 0);
    let x = 0;
    const total = Math.max(1, st.received, accounted);
    const segs = parts.map(([k, c]) => {
      const w = (st[k] || 0) / total;
      const r = svg('rect', { x: pct(x), y: 0, width: pct(w), height: 18, fill: c, stroke: '#fff', 'stroke-width': 1 }, svg('title', {}, `${k}: ${st[k]}`));
      x += w;
      return r;
    });
    const inFlight = st.received - accounted;
    $('stats').replaceChildren(
      h('div', { class: 'bars' },
        h('span', { class: 'lbl' }, 'received'),
        svg('svg', { role: 'img', 'aria-label': parts.map(([k]) => `${k} ${st[k]}`).join(', '), style: 'height:18px', preserveAspectRatio: 'none' }, segs),
        h('span', { class: 'num', 'data-count': 'stats:received', 'data-value': st.received }, num(st.received)),
        parts.map(([k, c]) => [
          h('span', { class: 'lbl' }, h('i', { class: 'sw', style: `background:${c}` }), ` ${k === 'deadlettered' ? 'dead-lettered' : k}`),
          h('span'),
          h('span', { class: 'num', 'data-count': `stats:${k}`, 'data-value': st[k] }, num(st[k])),
        ]),
        h('span', { class: 'lbl' }, 'resources'), h('span'),
        h('span', { class: 'num', 'data-count': 'stats:resources', 'data-value': st.resources }, num(st.resources))),
      h('p', { class: `acct${inFlight === 0 ? ' ok' : ''}` }, inFlight === 0
        ? 'Every received event is accounted for.'
        : `${num(Math.abs(inFlight))} event${Math.abs(inFlight) === 1 ? '' : 's'} ${inFlight > 0 ? 'still in flight' : 'counted twice (retried)'}.`));
  }

  function callbackScope(c) {
    if (c.scope === 'resource') return h('code', {}, c.key);
    const f = Object.entries(c.filter || {});
    return f.length ? f.map(([k, v]) => `${k}=${v}`).join(' ') : h('span', { class: 'muted' }, 'every change');
  }
  function renderCallbacks() {
    const list = S.callbacks;
    if (!list) return;
    if (!list.length) {
      $('callbacks').replaceChildren(h('p', { class: 'empty' }, 'No callbacks registered. ',
        h('code', {}, 'dcm-status callbacks add --hook URL'), ' registers one.'));
      return;
    }
    const rows = list.map((c) => {
      const st = c.stats;
      const failing = st.consecutiveFailures > 0;
      const error = st.lastError ? `${st.lastStatus != null ? st.lastStatus + ' · ' : ''}${st.lastError}` : '';
      return h('tr', { 'data-callback': c.id },
        h('td', {}, h('code', { title: c.hook }, c.hook.length > 60 ? `${c.hook.slice(0, 59)}…` : c.hook),
          h('br'), h('span', { class: 'muted small' }, c.id)),
        h('td', {}, callbackScope(c)),
        h('td', {}, c.disabled
          ? h('span', { class: 'badge bad', 'data-testid': 'callback-disabled', title: c.disabled }, 'disabled')
          : h('span', { class: 'badge good' }, 'enabled')),
        h('td', { class: 'num' }, num(st.delivered)),
        h('td', { class: 'num' }, failing
          ? h('span', { class: 'badge bad', 'data-testid': 'callback-failing' }, num(st.consecutiveFailures))
          : '0'),
        h('td', {}, when(st.lastSuccessAt)),
        h('td', {}, when(st.lastFailureAt), error
          ? [h('br'), h('span', { class: 'muted small', title: error, 'data-testid': 'callback-error' },
            error.length > 80 ? `${error.slice(0, 79)}…` : error)] : ''),
        h('td', { class: 'num' }, num(st.exhausted)));
    });
    $('callbacks').replaceChildren(h('table', { class: 'grid' },
      h('thead', {}, h('tr', {}, ['Hook', 'For', 'State', 'Delivered', 'Failing in a row', 'Last success',
        'Last failure', 'Given up'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows)));
  }

  // ---- loading and refreshing the aggregates -----------------------------------------------
  async function loadSummary() {
    try {
      const got = await request('v1/summary');
      takeSummary(got.body);
      loaded('Fleet summary');
      renderSummary();
      renderAsOf();
      delete S.snapshotFailed.summary;
      scheduleSnapshot('summary', loadSummary, snapshotDelay(got));
    } catch (e) {
      showError(e, 'Fleet summary');
      if (!S.summary) $('fleet').replaceChildren(h('p', { class: 'empty' }, 'Not available: see the error above.'));
      S.snapshotFailed.summary = loadSummary;  // read again when the stream is back, else in 5 s
      scheduleSnapshot('summary', loadSummary, REFRESH_MIN_MS);
    }
  }
  // A snapshot replaces the counts; the changes committed after its asOf are not in it: applied again.
  function takeSummary(body) {
    const newer = !S.summary || S.summary.asOf !== body.asOf;
    S.pending = S.pending.filter((c) => c.committedAt > body.asOf);
    S.summary = body;
    if (newer) window.dcmCharts.onSnapshot(body.asOf);  // the sweep wrote the trends with it: the charts read them
    for (const c of S.pending) moveSummary(body, c);
  }
  function renderAsOf() {
    const sm = S.summary;
    const e = $('refreshed');
    e.textContent = `counts as of ${clock(sm.asOf)}${sm.outdated ? ' (outdated)' : ''}`;
    e.dataset.asOf = sm.asOf;
    e.classList.toggle('outdated', !!sm.outdated);
    e.title = sm.outdated
      ? `The platform has not refreshed these counts since ${full(sm.asOf)} (it does every ${sm.everySeconds} s): the sweep is not running?`
      : `Counts as of ${full(sm.asOf)}, refreshed by the platform every ${sm.everySeconds} s; moved live since by each change`;
  }
  // How long until a snapshot's next one is due (the server's clock: its Date header), read then; not sooner
  // than REFRESH_MIN_MS, not later than a period; every REFRESH_IDLE_MS at most while it is outdated.
  function snapshotDelay(got) {
    const every = (got.body.everySeconds || 60) * 1000;
    if (got.body.outdated) return Math.min(every, REFRESH_IDLE_MS);
    const now = isNaN(got.date) ? Date.now() : got.date;
    const due = Date.parse(got.body.asOf) + every + SNAPSHOT_SLACK_MS;
    return Math.min(every, Math.max(REFRESH_MIN_MS, due - now));
  }
  function scheduleSnapshot(kind, load, delay) {
    clearTimeout(S.snapshotTimers[kind]);
    S.snapshotTimers[kind] = setTimeout(() => {
      if (document.visibilityState === 'visible') load();
      else S.snapshotDue[kind] = load;  // a hidden page reads nothing: read once it is seen again
    }, delay);
  }
  function loadDueSnapshots() {
    for (const [kind, load] of Object.entries(S.snapshotDue)) { delete S.snapshotDue[kind]; load(); }
  }
  async function loadDead() {
    try { S.dead = await api('v1/deadletters'); loaded('Dead letters'); renderDead(); } catch (e) { showError(e, 'Dead letters'); }
  }
  async function loadCallbacks() {
    try { S.callbacks = (await api('v1/callbacks')).callbacks; loaded('Callbacks'); renderCallbacks(); } catch (e) { showError(e, 'Callbacks'); }
  }
  async function loadStats() {
    try {
      const got = await request('v1/stats');
      S.stats = got.body;
      loaded('Pipeline stats');
      renderStats();
      delete S.snapshotFailed.stats;
      scheduleSnapshot('stats', loadStats, snapshotDelay(got));
    } catch (e) {
      showError(e, 'Pipeline stats');
      S.snapshotFailed.stats = loadStats;
      scheduleSnapshot('stats', loadStats, REFRESH_MIN_MS);
    }
  }
  function scheduleRefresh(delay) {
    const wait = delay != null ? delay : Math.max(1000, S.lastRefresh + REFRESH_MIN_MS - Date.now());
    if (S.refreshTimer && S.refreshDue <= Date.now() + wait) return;  // one already comes sooner
    clearTimeout(S.refreshTimer);
    S.refreshDue = Date.now() + wait;
    S.refreshTimer = setTimeout(refreshAggregates, wait);
  }
  async function refreshAggregates() {
    S.refreshTimer = null;
    S.lastRefresh = Date.now();
    const before = S.changesSeen;
    await Promise.all([loadDead(), loadCallbacks(),  // the summary and the stats: on their snapshots' schedule
      S.view === 'dashboard' ? loadTableCounts() : null]);
    // A change that arrived while the counts were read may or may not be in them: read again.
    if (S.changesSeen !== before) scheduleRefresh();
  }

  // ---- the live feed -----------------------------------------------------------------------
  function remember(id) {
    S.seen.add(id);
    S.seenOrder.push(id);
    while (S.seenOrder.length > SEEN_MAX) S.seen.delete(S.seenOrder.shift());
  }
  const badge = (status, extra) =>
    status ? h('span', { class: `badge ${family(status)}`, ...(extra || {}) }, status) : h('span', { class: 'badge none' }, 'new');

  function feedItem(c, fresh) {
    const attrs = (c.changes || []).map((x) => x.attribute.replace(/^\//, '')).filter((a) => a !== 'status' && a !== 'rawStatus');
    return h('li', { class: `${c.late ? 'late' : ''}${fresh ? ' new' : ''}`, 'data-change-id': c.id, 'data-key': c.key, 'data-committed-at': c.committedAt,
      'data-old-status': c.oldStatus || '', 'data-new-status': c.newStatus, 'data-late': String(!!c.late) },
      h('time', { datetime: c.committedAt, title: full(c.committedAt) }, clock(c.committedAt)),
      h('a', { class: 'key mono', href: resourceHref(c), title: c.key }, c.key),
      c.late
        ? h('span', { class: 'transition' },
          h('span', { class: 'late-tag', title: 'A late update: it goes into the history, the current state does not change' }, 'late'),
          badge(c.newStatus),
          c.resource && c.resource.observedAt
            ? h('span', { class: 'muted small', title: full(c.resource.observedAt) }, `observed ${clock(c.resource.observedAt)}`) : null)
        : h('span', { class: 'transition' },
          badge(c.oldStatus), h('span', { class: 'arrow', 'aria-label': 'to' }, '→'), badge(c.newStatus),
          c.oldStatus === c.newStatus && attrs.length ? h('span', { class: 'muted small' }, attrs.join(', ')) : null));
  }
  function addToFeed(c, fresh) {
    // Newest commit on top: a change that arrives late (after a reconnect) takes its place in time.
    const feed = $('feed');
    const after = [...feed.children].find((li) => (li.dataset.committedAt || '') < c.committedAt);
    feed.insertBefore(feedItem(c, fresh), after || null);
    while (feed.children.length > FEED_SIZE) feed.lastElementChild.remove();
    $('feed-empty').hidden = feed.children.length > 0;
  }

  function onChange(c) {
    if (!c || !c.id || S.seen.has(c.id)) return;  // delivered twice: live, then settled after a reconnect
    remember(c.id);
    S.changesSeen += 1;
    window.dcmCharts.onChange(c);
    addToFeed(c, true);
    if (R.key === c.key) reloadResourceSoon();
    if (c.late) return;  // history, not the current state: no count or row moves
    applyToSummary(c);
    applyToTable(c);
    scheduleRefresh();
  }

  function applyToSummary(c, quiet) {
    const sm = S.summary;
    // Committed at or before the snapshot's asOf: counted there (both canonical UTC text: compared as text).
    if (!c.committedAt || (sm && c.committedAt <= sm.asOf)) return;
    S.pending.push(c);  // kept for the next snapshot, which may or may not hold it (takeSummary)
    while (S.pending.length > SEEN_MAX) S.pending.shift();
    if (!sm) return;  // the first summary is not there yet: it takes it then
    renderSummary(moveSummary(sm, c));
    if (c.oldStatus == null && !quiet) flash($('kpi-total'));
  }
  // Move the summary's counts by one change; the counts it moved.
  function moveSummary(sm, c) {
    const counts = (sm.byType[c.resourceType] = sm.byType[c.resourceType] || {});
    const changed = new Set([`${c.resourceType}:${c.newStatus}`]);
    if (c.oldStatus == null) {
      sm.total += 1;
      sm.byProvider[c.provider] = (sm.byProvider[c.provider] || 0) + 1;
    } else {
      counts[c.oldStatus] = Math.max(0, (counts[c.oldStatus] || 0) - 1);
      changed.add(`${c.resourceType}:${c.oldStatus}`);
    }
    counts[c.newStatus] = (counts[c.newStatus] || 0) + 1;
    return changed;
  }

  // ---- the live stream ---------------------------------------------------------------------
  const LIVE_TITLES = {
    polling: 'The live stream was refused (the API holds as many streams as it may, or is unavailable): ' +
      'changes are read from v1/changes instead, and the stream is tried again with back-off',
  };
  function setLive(state) {
    const e = $('live');
    e.dataset.state = state;
    e.textContent = state;
    e.title = LIVE_TITLES[state] || 'The live change stream';
  }
  function openStream() {
    clearTimeout(S.retryTimer);
    if (S.es) S.es.close();
    const es = new EventSource(`v1/changes/stream${S.cursor ? `?after=${encodeURIComponent(S.cursor)}` : ''}`);
    S.es = es;
    es.onopen = () => {
      if (S.es !== es) return;
      const wasDown = $('live').dataset.state === 'reconnecting';
      setLive('live');
      S.retryDelay = 1000;
      if (wasDown) {  // back after an outage: read the counts again now, and the snapshots that failed
        scheduleRefresh(0);
        for (const load of Object.values(S.snapshotFailed)) load();
      }
    };
    es.addEventListener('ready', (e) => {
      if (S.es !== es || !e.lastEventId) return;
      S.cursor = e.lastEventId;  // what committed just before the stream opened, it sends once settled
    });
    es.addEventListener('change', (e) => {
      if (S.es !== es) return;
      if (e.lastEventId) S.cursor = e.lastEventId;
      let change;
      try { change = JSON.parse(e.data); } catch (_) { return; }
      onChange(change);
    });
    es.onerror = () => {
      if (S.es !== es) return;
      setLive('reconnecting');  // EventSource retries by itself, sending Last-Event-ID
      if (es.readyState === EventSource.CLOSED) {  // refused (an HTTP error): poll meanwhile, then retry
        setLive('polling');
        S.es = null;
        S.retryTimer = setTimeout(recoverStream, S.retryDelay);
        S.retryDelay = Math.min(S.retryDelay * 2, S.retryMax);
      }
    };
  }
  async function recoverStream() {
    if (!S.cursor) { startFeed(); return; }
    let page;
    try {
      page = await api('v1/changes', { after: S.cursor, limit: POLL_LIMIT });
    } catch (e) {
      if (e.status === 410 || e.status === 400) {  // the cursor expired (or was refused): start over
        showError(e, 'Live changes: started again from the current state');
        S.cursor = null;
        await startFeed();
        S.pending = [];  // changes may have been missed: the next snapshot is the truth
        loadSummary();
        refreshAggregates();
        if (S.view === 'dashboard') loadTable();
        return;
      }
      S.retryTimer = setTimeout(recoverStream, S.retryDelay);
      S.retryDelay = Math.min(S.retryDelay * 2, S.retryMax);
      return;
    }
    loaded('Live changes');
    for (const c of page.changes) onChange(c);  // what the stream would have sent meanwhile (once each, by id)
    if (page.changes.length) S.cursor = page.nextCursor;  // else keep it: a settled cursor, the stream resumes there
    openStream();
  }
  async function startFeed() {
    let page;
    try {
      page = await api('v1/changes', { last: FEED_SIZE });
    } catch (e) {
      showError(e, 'Latest changes');
      setLive('reconnecting');
      S.retryTimer = setTimeout(recoverStream, S.retryDelay);
      S.retryDelay = Math.min(S.retryDelay * 2, S.retryMax);
      return;
    }
    loaded('Latest changes');
    $('feed').replaceChildren();
    for (const c of page.changes) {  // oldest first: the newest ends on top
      if (!S.seen.has(c.id)) {
        remember(c.id);
        if (!c.late) applyToSummary(c, true);  // committed after the summary's asOf: not in it
      }
      addToFeed(c, false);
    }
    $('feed-empty').hidden = page.changes.length > 0;
    S.cursor = page.nextCursor;  // the stream starts where this page ends: nothing in between is lost
    openStream();
  }
  // For tests and operators: drop the connection as a network failure would; it reopens from its cursor
  // after reopenAfterMs (never when negative: then reconnect() does).
  function dropConnection(reopenAfterMs) {
    if (S.es) S.es.close();
    S.es = null;
    setLive('reconnecting');
    clearTimeout(S.retryTimer);
    const ms = reopenAfterMs == null ? 1000 : reopenAfterMs;
    if (ms >= 0) S.retryTimer = setTimeout(recoverStream, ms);
  }
  function reconnect() {
    clearTimeout(S.retryTimer);
    recoverStream();
  }

  // ---- the resource table ------------------------------------------------------------------
  const filterForm = () => ({
    provider: $('f-provider').value, type: $('f-type').value, status: $('f-status').value,
    label: $('f-label').value.trim(), q: $('f-q').value.trim(), sort: $('f-sort').value,
  });
  function setFilterForm(f) {
    for (const k of ['provider', 'type', 'status']) ensureOption($(`f-${k}`), f[k]);
    $('f-provider').value = f.provider;
    $('f-type').value = f.type;
    $('f-status').value = f.status;
    $('f-label').value = f.label;
    $('f-q').value = f.q;
    $('f-sort').value = f.sort;
    validateLabel();
  }
  function ensureOption(select, value) {
    if (value && ![...select.options].some((o) => o.value === value)) select.append(h('option', { value }, value));
  }
  function setOptions(select, values) {
    const current = select.value;
    const wanted = ['', ...values];
    if (current && !wanted.includes(current)) wanted.push(current);
    const have = [...select.options].map((o) => o.value);
    if (have.join('\n') === wanted.join('\n')) return;
    select.replaceChildren(...wanted.map((v) => h('option', { value: v }, v || 'all')));
    select.value = current;
  }
  function fillFilterOptions() {
    const sm = S.summary;
    setOptions($('f-provider'), Object.keys(sm.byProvider).sort());
    setOptions($('f-type'), Object.keys(sm.byType).sort());
    const types = T.filters.type ? [T.filters.type] : Object.keys(sm.byType);
    const statuses = new Set();
    for (const t of types) for (const [s, n] of Object.entries(sm.byType[t] || {})) if (n) statuses.add(s);
    setOptions($('f-status'), [...statuses].sort(byStatusOrder));
  }
  function validateLabel() {
    const v = $('f-label').value.trim();
    const ok = !v || LABEL_PATTERN.test(v);
    $('f-label').setAttribute('aria-invalid', String(!ok));
    $('f-label-help').style.color = ok ? '' : 'var(--bad)';
    return ok;
  }
  function filterQuery(f) {
    const q = new URLSearchParams();
    for (const k of ['provider', 'type', 'status', 'label', 'q']) if (f[k]) q.set(k, f[k]);
    if (f.sort && f.sort !== 'key') q.set('sort', f.sort);
    return q;
  }
  function filtersFromQuery(q) {
    const f = { provider: '', type: '', status: '', label: '', q: '', sort: 'key' };
    for (const k of Object.keys(f)) if (q.get(k)) f[k] = q.get(k);
    if (!['key', '-updatedAt'].includes(f.sort)) f.sort = 'key';
    return f;
  }
  const sameFilters = (a, b) => Object.keys(a).every((k) => a[k] === b[k]);
  function tableHash() {
    const q = filterQuery(T.filters).toString();
    return `#/resources${q ? `?${q}` : ''}`;
  }
  function applyFilters() {
    if (!validateLabel()) return;
    const f = filterForm();
    if (sameFilters(f, T.filters)) return;
    T.filters = f;
    T.tokens = [null];
    if (location.hash.startsWith('#/resources')) history.replaceState(null, '', tableHash());
    updateNav();
    if (S.summary) fillFilterOptions();
    loadTable();
  }
  function tableParams(extra) {
    const f = T.filters;
    return { provider: f.provider, type: f.type, status: f.status, label: f.label, q: f.q,
      sort: f.sort === 'key' ? null : f.sort, ...extra };
  }
  async function loadTable() {
    const seq = ++T.seq;
    T.countSeq++;  // a counts-only read in flight is older than this one
    const body = $('rows');
    body.classList.add('loading');
    try {
      const got = await request('v1/resources', tableParams({
        withCounts: 'true', pageSize: PAGE_SIZE, pageToken: T.tokens[T.tokens.length - 1],
      }));
      const page = got.body;
      if (seq !== T.seq) return;
      T.countsAt = got.date;
      loaded('Resources');
      T.next = page.nextPageToken;
      T.total = page.total;
      T.counts = page.counts || {};
      renderRows(body, page.resources);
      renderTableSummary();
    } catch (e) {
      if (seq !== T.seq) return;
      showError(e, 'Resources');
    } finally {
      if (seq === T.seq) {
        body.classList.remove('loading');
        renderPager();
      }
    }
  }
  async function loadTableCounts() {
    const seq = ++T.countSeq;
    const tableSeq = T.seq;
    try {
      const got = await request('v1/resources', tableParams({ withCounts: 'true', pageSize: 1 }));
      const page = got.body;
      if (seq !== T.countSeq || tableSeq !== T.seq) return;
      T.countsAt = got.date;
      loaded('Resource counts');
      T.total = page.total;
      T.counts = page.counts || {};
      renderTableSummary();
    } catch (e) { showError(e, 'Resource counts'); }
  }
  function renderTableSummary() {
    $('table-total').textContent = T.total == null ? '–' : num(T.total);
    $('table-total').dataset.value = T.total == null ? '' : T.total;
    const chips = Object.entries(T.counts || {}).filter(([, n]) => n > 0).sort((a, b) => byStatusOrder(a[0], b[0]))
      .map(([s, n]) => h('span', { class: 'chip', 'data-count': `table:${s}`, 'data-value': n },
        h('i', { class: 'sw', style: `background:${colour(s)}` }), s, ' ', h('b', {}, num(n))));
    $('table-counts').replaceChildren(...chips);
    $('rows-empty').hidden = $('rows').children.length > 0;
  }
  function renderPager() {
    const page = T.tokens.length;
    $('page-info').textContent = `Page ${page}${T.total != null ? ` of ${Math.max(1, Math.ceil(T.total / PAGE_SIZE))}` : ''}`;
    $('prev').disabled = page <= 1;
    $('next').disabled = !T.next;
    $('rows-empty').hidden = $('rows').children.length > 0;
  }
  // A page read again leaves the rows it shows unchanged in place: a row replaced under the pointer loses the
  // click being made on it (mousedown on the old row, mouseup on the new one), and an operator's click on a
  // resource then did nothing.
  const rowSignature = (r) => JSON.stringify([r.key, r.status, r.rawStatus, r.message, r.updatedAt, r.lastSeenAt]);
  function renderRows(body, resources) {
    const shown = new Map([...body.children].filter((tr) => !tr.classList.contains('unmatched')).map((tr) => [tr.dataset.sig, tr]));
    const rows = resources.map((r) => shown.get(rowSignature(r)) || row(r));
    if (rows.length === body.children.length && rows.every((tr, i) => body.children[i] === tr)) return;
    body.replaceChildren(...rows);
  }
  function row(r) {
    return h('tr', { 'data-key': r.key, 'data-status': r.status, 'data-updated': r.updatedAt || '', 'data-sig': rowSignature(r) },
      h('td', { class: 'mono' }, h('a', { href: resourceHref(r) }, r.key)),
      h('td', { 'data-testid': 'status', title: r.rawStatus && r.rawStatus !== r.status ? `reported as ${r.rawStatus}` : null },
        badge(r.status)),
      h('td', { class: 'msg', title: r.message || '' }, r.message || ''),
      h('td', { class: 'when' }, when(r.updatedAt)),
      h('td', { class: 'when' }, when(r.lastSeenAt)));
  }
  // Python's quote(id, safe=''): the document id the API sorts by key with.
  const docId = (r) => `${r.provider}~${r.resourceType}~${encodeURIComponent(r.resourceId)
    .replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)}`;
  function matches(r, f, ignoreStatus) {
    if (f.provider && r.provider !== f.provider) return false;
    if (f.type && r.resourceType !== f.type) return false;
    if (!ignoreStatus && f.status && r.status !== f.status) return false;
    if (f.q && !String(r.resourceId).startsWith(f.q)) return false;
    if (f.label) {
      const i = f.label.indexOf(':');
      if (((r.metadata || {})[f.label.slice(0, i)] || null) !== f.label.slice(i + 1)) return false;
    }
    return true;
  }
  // Where a resource sorts in the table (the API's orders): negative = before.
  function compareRows(a, b) {
    if (T.filters.q) return a.resourceId < b.resourceId ? -1 : a.resourceId > b.resourceId ? 1 : docId(a) < docId(b) ? -1 : docId(a) > docId(b) ? 1 : 0;
    if (T.filters.sort === '-updatedAt') return (b.updatedAt || '') < (a.updatedAt || '') ? -1 : 1;
    return docId(a) < docId(b) ? -1 : docId(a) > docId(b) ? 1 : 0;
  }
  const rowResource = (tr) => {
    const [provider, resourceType, ...rest] = tr.dataset.key.split('/');
    return { provider, resourceType, resourceId: rest.join('/'), updatedAt: tr.dataset.updated };
  };
  function applyToTable(c) {
    const r = { key: c.key, provider: c.provider, resourceType: c.resourceType, resourceId: c.resourceId, ...(c.resource || {}), status: c.newStatus };
    const f = T.filters;
    if (T.counts && matches(r, f, true) && !(Date.parse(c.committedAt) < T.countsAt)) {  // the filtered set's counts
      if (c.oldStatus != null) T.counts[c.oldStatus] = Math.max(0, (T.counts[c.oldStatus] || 0) - 1);
      T.counts[c.newStatus] = (T.counts[c.newStatus] || 0) + 1;
      if (f.status) T.total += (c.newStatus === f.status ? 1 : 0) - (c.oldStatus === f.status ? 1 : 0);
      else if (c.oldStatus == null) T.total += 1;
      renderTableSummary();
    }
    const body = $('rows');
    const existing = [...body.children].find((tr) => tr.dataset.key === c.key);
    if (existing) {
      if ((existing.dataset.updated || '') >= (r.updatedAt || '~')) return;  // the table already shows this state or a later one
      const tr = row(r);
      if (!matches(r, f)) {
        tr.classList.add('unmatched');
        tr.title = 'No longer matches the filters';
      }
      if (f.sort === '-updatedAt' && !f.q && T.tokens.length === 1) {
        existing.remove();
        body.prepend(tr);
      } else {
        existing.replaceWith(tr);
      }
      flash(tr);
      return;
    }
    if (!matches(r, f)) return;
    // A resource not shown: insert it if it sorts onto this page.
    const rows = [...body.children];
    const first = T.tokens.length === 1;
    const last = !T.next;
    let before = rows.find((tr) => compareRows(r, rowResource(tr)) < 0);
    if (!rows.length) { if (!(first && last)) return; }
    else if (!before) { if (!last) return; }  // after the last row: it belongs on a later page
    else if (before === rows[0] && !first) return;  // before the first row: it belongs on an earlier page
    const tr = row(r);
    if (before) body.insertBefore(tr, before); else body.append(tr);
    flash(tr);
    $('rows-empty').hidden = true;
    // Rows inserted live make the page longer than a page: read it again once it is much longer.
    if (body.children.length > PAGE_SIZE * 1.5) reloadTableSoon();
  }
  const reloadTableSoon = debounce(() => loadTable(), 2000);

  // ---- one resource ------------------------------------------------------------------------
  const FIELD_ORDER = ['key', 'status', 'rawStatus', 'statusRecognized', 'message', 'reason', 'lastTransitionTime', 'observedAt',
    'updatedAt', 'lastSeenAt', 'createdAt', 'updates', 'reReports', 'provider', 'resourceType', 'resourceId', 'eventId',
    'eventSource', 'publishedAt', 'dataschema', 'metadata', 'resourceSpecific', 'output_spec', 'outputs'];
  const REDACTED = '[redacted]';  // an output value the platform's redaction list hides (docs/security.md)
  const plain = (x) => x === REDACTED ? h('span', { class: 'muted', title: 'hidden by the redaction list' }, x) : String(x);
  const TIME_FIELDS = /(At|Time)$/;
  function fieldValue(k, v) {
    if (v == null || v === '') return h('span', { class: 'muted' }, '–');
    if (k === 'status' || k === 'previousStatus') return badge(v);
    if (typeof v === 'object') {
      const entries = Object.entries(v);
      if (!entries.length) return h('span', { class: 'muted' }, '{}');
      if (entries.every(([, x]) => x == null || typeof x !== 'object')) {
        return h('dl', { class: 'fields' }, entries.map(([a, b]) => [h('dt', {}, a), h('dd', {}, b == null ? '–' : plain(b))]));
      }
      return h('pre', { class: 'json' }, JSON.stringify(v, null, 2));
    }
    if (typeof v === 'string' && TIME_FIELDS.test(k)) return h('span', { title: v }, full(v));
    return String(v);
  }
  function fields(doc) {
    const keys = [...FIELD_ORDER.filter((k) => k in doc), ...Object.keys(doc).filter((k) => !FIELD_ORDER.includes(k)).sort()];
    return h('dl', { class: 'fields' }, keys.map((k) => [h('dt', {}, k), h('dd', { 'data-field': k }, fieldValue(k, doc[k]))]));
  }
  function routeResource(provider, type, id) {
    const key = `${provider}/${type}/${id}`;
    if (R.key !== key) {
      for (const what of ['Resource', 'Timeline', 'History']) loaded(what);
      Object.assign(R, { key, provider, type, id, tokens: [null], next: null, at: null });
      $('asof-input').value = '';
      $('r-key').textContent = key;
      $('r-status').replaceChildren();
      $('state').replaceChildren(h('p', { class: 'empty' }, 'Loading…'));
      $('timeline').replaceChildren();
      $('history-rows').replaceChildren();
      $('asof-note').hidden = true;
    }
    document.title = `${key} · dcm-status`;
    loadResource();
  }
  function loadResource() {
    loadState();
    loadTimeline();
    loadHistory();
  }
  const reloadResourceSoon = debounce(() => {
    if (S.view !== 'resource') return;
    if (!R.at) loadState();
    loadTimeline();
    if (R.tokens.length === 1) loadHistory();
  }, 400);
  async function loadState() {
    const seq = ++R.seq;
    const base = resourcePath(R.provider, R.type, R.id);
    try {
      if (R.at) {
        const got = await api(base, { at: R.at });
        if (seq !== R.seq) return;
        loaded('Resource');
        $('asof-note').hidden = false;
        $('asof-note').textContent = `What the platform knew at ${full(got.at)}: the update observed ${full(got.state.observedAt)}`
          + `, recorded ${full(got.state.recordedAt)}.`;
        $('state').replaceChildren(fields(got.state));
        $('r-status').replaceChildren(badge(got.state.status, { 'data-testid': 'resource-status' }), h('span', { class: 'muted small' }, 'as of then'));
      } else {
        const doc = await api(base);
        if (seq !== R.seq) return;
        loaded('Resource');
        $('asof-note').hidden = true;
        $('state').replaceChildren(fields(doc));
        $('r-status').replaceChildren(badge(doc.status, { 'data-testid': 'resource-status' }));
        flash($('r-status'));
      }
    } catch (e) {
      if (seq !== R.seq) return;
      showError(e, 'Resource');
      $('state').replaceChildren(h('p', { class: 'empty' }, e.detail || 'Not available.'));
    }
  }
  async function loadTimeline() {
    const key = R.key;
    try {
      const page = await api(`${resourcePath(R.provider, R.type, R.id)}/history`, { pageSize: TIMELINE_MAX });
      if (key !== R.key) return;
      loaded('Timeline');
      $('timeline').replaceChildren(timeline(page.entries, !!page.nextPageToken));
    } catch (e) {
      if (key !== R.key) return;
      showError(e, 'Timeline');
      $('timeline').replaceChildren(h('p', { class: 'empty' }, 'No timeline.'));
    }
  }
  function timeline(entries, truncated) {
    const points = entries.map((e) => ({ ...e, t: Date.parse(e.observedAt) })).filter((e) => !isNaN(e.t))
      .sort((a, b) => a.t - b.t || (a.recordedAt < b.recordedAt ? -1 : 1));
    if (!points.length) return h('p', { class: 'empty' }, 'No recorded update.');
    const segments = [];
    for (const p of points) {  // one segment per state: consecutive updates of one status merge
      const last = segments[segments.length - 1];
      if (last && last.status === p.status) last.updates += 1;
      else segments.push({ status: p.status, from: p.t, updates: 1, observedAt: p.observedAt });
    }
    const start = segments[0].from;
    const lastT = points[points.length - 1].t;
    const now = Date.now();
    const end = Math.max(now, lastT + Math.max(1000, (lastT - start) * 0.05));
    segments.forEach((s, i) => { s.to = i + 1 < segments.length ? segments[i + 1].from : end; });
    const span = Math.max(1, end - start);
    const X = (t) => (t - start) / span;
    const nodes = [];
    for (const s of segments) {
      const x = X(s.from), w = Math.max(X(s.to) - x, 0.002);
      const until = s.to === end && end >= now ? 'now' : full(new Date(s.to).toISOString());
      nodes.push(svg('rect', { class: 'tl-seg', x: pct(x), y: 4, width: pct(w), height: 34, fill: colour(s.status), 'data-status': s.status, 'data-from': s.observedAt },
        svg('title', {}, `${s.status} from ${full(s.observedAt)} until ${until} (${duration(s.to - s.from)}; ${s.updates} update${s.updates > 1 ? 's' : ''})`)));
      if (w > 0.07) {
        nodes.push(svg('text', { class: `tl-seg-label`, x: pct(x + 0.006), y: 25, style: inkOn(colour(s.status)) === 'dark' ? 'fill:#1b2330' : null }, s.status));
      }
    }
    const ticks = Math.max(1, Math.min(5, Math.floor(span / 1000)));
    const oneDay = new Date(start).toDateString() === new Date(end).toDateString();
    for (let i = 0; i <= ticks; i++) {
      const t = new Date(start + (span * i) / ticks);
      nodes.push(svg('line', { x1: pct(i / ticks), x2: pct(i / ticks), y1: 38, y2: 44, stroke: '#9aa3b2' }));
      nodes.push(svg('text', { class: 'tl-axis', x: pct(i / ticks), y: 57, 'text-anchor': i === 0 ? 'start' : i === ticks ? 'end' : 'middle' },
        oneDay ? clockFmt.format(t) : dayFmt.format(t)));
    }
    const present = [...new Set(segments.map((s) => s.status))].sort(byStatusOrder);
    return h('div', { class: 'timeline' },
      svg('svg', { height: 62, role: 'img', 'data-segments': segments.length,
        'aria-label': `Status over time: ${segments.map((s) => `${s.status} from ${s.observedAt}`).join(', ')}` }, nodes),
      h('div', { class: 'legend' },
        present.map((s) => h('span', { class: 'legend-group' }, h('i', { class: 'sw', style: `background:${colour(s)}` }), s)),
        h('span', {}, `${points.length} update${points.length > 1 ? 's' : ''} from ${full(points[0].observedAt)}`),
        truncated ? h('span', {}, `(the latest ${TIMELINE_MAX} only)`) : null));
  }
  async function loadHistory() {
    const key = R.key;
    try {
      const page = await api(`${resourcePath(R.provider, R.type, R.id)}/history`, {
        pageSize: HISTORY_PAGE, pageToken: R.tokens[R.tokens.length - 1],
      });
      if (key !== R.key) return;
      loaded('History');
      R.next = page.nextPageToken;
      $('history-rows').replaceChildren(...page.entries.map((e) => h('tr', { 'data-testid': 'history-row', 'data-status': e.status, 'data-outcome': e.outcome },
        h('td', { class: 'when', title: e.observedAt }, full(e.observedAt).replace(/ \(.*\)$/, '')),
        h('td', {}, e.previousStatus ? [badge(e.previousStatus), ' → '] : null, badge(e.status)),
        h('td', {}, e.outcome === 'stale'
          ? h('span', { class: 'late-tag', title: 'Older than the state it arrived after: recorded, not applied' }, 'stale')
          : e.outcome),
        h('td', { class: 'msg', title: [e.message, e.reason].filter(Boolean).join(' · ') },
          e.message || '', e.reason ? h('span', { class: 'muted' }, ` (${e.reason})`) : null),
        h('td', { class: 'when', title: e.recordedAt }, clock(e.recordedAt)))));
      if (!page.entries.length) $('history-rows').replaceChildren(h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No recorded update.')));
    } catch (e) {
      if (key !== R.key) return;
      showError(e, 'History');
    } finally {
      if (key === R.key) {
        $('h-page-info').textContent = `Page ${R.tokens.length}`;
        $('h-prev').disabled = R.tokens.length <= 1;
        $('h-next').disabled = !R.next;
      }
    }
  }

  // ---- routing -----------------------------------------------------------------------------
  function updateNav() {
    $('back').href = tableHash();
    document.querySelector('[data-nav="resources"]').href = tableHash();
    for (const a of document.querySelectorAll('[data-nav]')) {
      const active = a.dataset.nav === 'usage' ? S.view === 'usage'
        : (a.dataset.nav === 'resources') === (location.hash.startsWith('#/resources')) && S.view === 'dashboard';
      if (active) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
  }
  function show(view) {
    S.view = view;
    $('view-dashboard').hidden = view !== 'dashboard';
    $('view-resource').hidden = view !== 'resource';
    $('view-usage').hidden = view !== 'usage';
    if (view !== 'usage') window.dcmCharts.hideUsage();
  }
  function route() {
    const hash = location.hash.replace(/^#/, '') || '/';
    const qi = hash.indexOf('?');
    const path = qi < 0 ? hash : hash.slice(0, qi);
    const query = new URLSearchParams(qi < 0 ? '' : hash.slice(qi + 1));
    if (path.startsWith('/resource/')) {
      const parts = path.slice('/resource/'.length).split('/');
      if (parts.length >= 3 && parts.every((p, i) => p || i > 2)) {
        try {
          const [provider, type] = parts.slice(0, 2).map(decodeURIComponent);
          const id = decodeURIComponent(parts.slice(2).join('/'));
          show('resource');
          updateNav();
          routeResource(provider, type, id);
          window.scrollTo(0, 0);
          return;
        } catch (_) { /* a malformed escape: said below */ }
      }
      showError(new ApiError(0, 'No such page', `${location.hash} is not #/resource/PROVIDER/TYPE/ID`, ''));
    }
    if (path === '/usage') {  // charts.js draws it
      show('usage');
      updateNav();
      document.title = 'dcm-status: usage';
      window.dcmCharts.showUsage(query);
      return;
    }
    const wasDashboard = S.view === 'dashboard';
    show('dashboard');
    $('view-dashboard').dataset.mode = path === '/resources' ? 'resources' : 'overview';
    R.key = null;
    document.title = 'dcm-status';
    if (path === '/resources') {
      const f = filtersFromQuery(query);
      if (!sameFilters(f, T.filters) || !wasDashboard) {
        const changed = !sameFilters(f, T.filters);
        T.filters = f;
        setFilterForm(f);
        if (changed) { T.tokens = [null]; }
        if (S.summary) fillFilterOptions();
        loadTable();
      }
    } else if (!wasDashboard) {
      loadTable();
    }
    window.scrollTo(0, 0);
    updateNav();
  }

  // ---- wiring ------------------------------------------------------------------------------
  function wire() {
    $('banner-close').addEventListener('click', clearError);
    for (const id of ['f-provider', 'f-type', 'f-status', 'f-sort']) $(id).addEventListener('change', applyFilters);
    const typed = debounce(applyFilters, SEARCH_DEBOUNCE_MS);
    $('f-q').addEventListener('input', typed);
    $('f-label').addEventListener('input', () => { if (validateLabel()) typed(); });
    $('filters').addEventListener('submit', (e) => { e.preventDefault(); applyFilters(); });
    $('f-reset').addEventListener('click', () => {
      setFilterForm({ provider: '', type: '', status: '', label: '', q: '', sort: 'key' });
      applyFilters();
    });
    $('next').addEventListener('click', () => { if (T.next) { T.tokens.push(T.next); loadTable(); } });
    $('prev').addEventListener('click', () => { if (T.tokens.length > 1) { T.tokens.pop(); loadTable(); } });
    $('h-next').addEventListener('click', () => { if (R.next) { R.tokens.push(R.next); loadHistory(); } });
    $('h-prev').addEventListener('click', () => { if (R.tokens.length > 1) { R.tokens.pop(); loadHistory(); } });
    $('asof').addEventListener('submit', (e) => {
      e.preventDefault();
      const v = $('asof-input').value;
      if (!v) { R.at = null; loadState(); return; }
      const d = new Date(v);  // the input is local time
      if (isNaN(d)) { showError(new ApiError(0, 'As of', `${v} is not a time`, '')); return; }
      R.at = d.toISOString();
      loadState();
    });
    $('asof-now').addEventListener('click', () => { $('asof-input').value = ''; R.at = null; loadState(); });
    window.addEventListener('hashchange', route);
    setInterval(() => {  // relative times ("2 min ago") age
      for (const e of document.querySelectorAll('[data-ago]')) if (e.dataset.ago) e.textContent = ago(e.dataset.ago);
    }, 15000);
    setInterval(() => { if (document.visibilityState === 'visible') scheduleRefresh(0); }, REFRESH_IDLE_MS);
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') { scheduleRefresh(0); loadDueSnapshots(); }
    });
  }
  window.addEventListener('error', (e) => showError(new ApiError(0, 'The dashboard hit an error', String(e.message), '')));
  window.addEventListener('unhandledrejection', (e) =>
    showError(e.reason instanceof ApiError ? e.reason : new ApiError(0, 'The dashboard hit an error', String(e.reason), '')));

  function start() {
    window.dcmCharts.start(api);
    wire();
    route();
    S.lastRefresh = Date.now();
    loadSummary();
    loadDead();
    loadStats();
    loadCallbacks();
    startFeed();
  }
  // A small handle for operators' consoles and tests (no behaviour depends on it).
  window.dcmDashboard = { dropConnection, reconnect, get cursor() { return S.cursor; }, get connection() { return S.es; }, state: S, table: T };
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start); else start();
})();
