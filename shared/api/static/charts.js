/*
 * The dashboard's charts (issue 40), drawn with the vendored Chart.js (assets/chart.umd.min.js, VENDORED.md):
 *
 * - "Pipeline": applied updates and dead letters per minute over the last 6 hours, from v1/trends (the sweep's
 *   per-minute counts); by provider on hover. Read whole once when the page opens (one read per stored minute),
 *   then only the minutes from the oldest one not yet complete, each time a new summary snapshot arrives (the
 *   sweep writes the current minute at the summary's pace); between snapshots each change of the live stream
 *   counts into its minute at once.
 * - "Usage" (#/usage?month=YYYY-MM&by=provider|tenant): resource-hours per UTC day as stacked bars, the table
 *   under it, and a "Download CSV" link to v1/usage. Read when the page is shown and again, while it is, on a
 *   snapshot at most every USAGE_REFRESH_MS (an hour: a computation reads the window's days of the daily usage
 *   snapshot, a month's at the region fleet ~107,000 reads; the api keeps a window's usage 5 minutes for paging
 *   and other readers: docs/cost.md).
 *
 * app.js calls window.dcmCharts: start(read), onSnapshot(), onChange(change), showUsage(query), hideUsage().
 * Tests read the charts' data from window.dcmCharts.pipeline / .usage (Chart instances) and the DOM.
 */
(function () {
  'use strict';

  const HOURS = 6;
  const USAGE_REFRESH_MS = 3600000;  // a computation reads a month's daily snapshot: hourly at most (docs/cost.md)
  const PALETTE = ['#2563eb', '#16a34a', '#d97706', '#9333ea', '#dc2626', '#0891b2', '#65a30d', '#db2777',
    '#4b5563', '#ea580c'];
  const $ = (id) => document.getElementById(id);
  const P = { minutes: new Map(), chart: null, loading: null, redraw: null };
  const U = { chart: null, month: null, by: 'provider', loadedAt: 0, shown: false, seq: 0 };

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k === 'class') e.className = v; else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children.flat(Infinity)) if (c != null) e.append(c instanceof Node ? c : String(c));
    return e;
  }
  let getJson = null;  // app.js's reader (start(read)): its errors, its retries of a busy moment
  const pad = (n) => String(n).padStart(2, '0');
  const hhmm = (iso) => { const d = new Date(iso); return `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`; };
  const minuteOf = (iso) => { const d = new Date(iso); d.setUTCSeconds(0, 0); return d.toISOString().replace('.000Z', 'Z'); };
  const colour = (i) => PALETTE[i % PALETTE.length];
  const note = (id, text) => { const e = $(id); e.textContent = text || ''; e.hidden = !text; };

  // ---- Pipeline ------------------------------------------------------------------------------
  function canonical(iso) { return new Date(iso).toISOString().replace('.000Z', 'Z'); }
  function takeBuckets(body) {
    for (const b of body.buckets) P.minutes.set(canonical(b.at), { ...b, local: {} });
    // the minute before, final, as the first minute's document holds it (one read, not two)
    if (body.before && P.minutes.has(canonical(body.before.at))) P.minutes.set(canonical(body.before.at), { ...body.before, local: {} });
    const oldest = Date.now() - HOURS * 3600000;
    for (const k of [...P.minutes.keys()]) if (Date.parse(k) < oldest - 60000) P.minutes.delete(k);
  }
  async function loadTrends(since) {
    if (P.loading) return P.loading;
    P.loading = (async () => {
      try {
        const body = await getJson(`v1/trends?since=${encodeURIComponent(since)}&step=60`);
        takeBuckets(body);
        P.asOf = body.asOf;
        drawPipeline();
      } catch (e) {
        note('pipeline-note', `Not available: ${e.message}`);
      } finally { P.loading = null; }
    })();
    return P.loading;
  }
  function pipelineSeries() {
    const keys = [...P.minutes.keys()].sort();
    const applied = [], dead = [], perProvider = [];
    for (const k of keys) {
      const m = P.minutes.get(k);
      const local = m.local || {};
      applied.push(m.applied + (local.applied || 0));
      dead.push(m.deadlettered);
      const providers = {};
      for (const [p, c] of Object.entries(m.providers || {})) providers[p] = { applied: c.applied, deadlettered: c.deadlettered };
      for (const [p, n] of Object.entries(local.byProvider || {})) {
        providers[p] = providers[p] || { applied: 0, deadlettered: 0 };
        providers[p].applied += n;
      }
      perProvider.push(providers);
    }
    return { keys, applied, dead, perProvider };
  }
  function drawPipeline() {
    const s = pipelineSeries();
    const total = s.applied.reduce((a, b) => a + b, 0) + s.dead.reduce((a, b) => a + b, 0);
    note('pipeline-note', total ? '' : `No update applied or dead-lettered in the last ${HOURS} hours.`);
    $('pipeline-asof').textContent = P.asOf ? `counted until ${hhmm(P.asOf)} UTC` : '';
    const data = {
      labels: s.keys.map(hhmm),
      datasets: [
        { label: 'applied', data: s.applied, borderColor: PALETTE[0], backgroundColor: PALETTE[0] + '33',
          fill: true, pointRadius: 0, borderWidth: 1.5, tension: 0 },
        { label: 'dead letters', data: s.dead, borderColor: PALETTE[4], backgroundColor: PALETTE[4] + '33',
          fill: true, pointRadius: 0, borderWidth: 1.5, tension: 0 },
      ],
    };
    P.perProvider = s.perProvider;
    P.keys = s.keys;
    if (P.chart) {
      P.chart.data = data;
      P.chart.update('none');
      return;
    }
    P.chart = new window.Chart($('pipeline-chart'), {
      type: 'line', data,
      options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        interaction: { mode: 'index', intersect: false },
        scales: { x: { ticks: { maxTicksLimit: 7, autoSkip: true, maxRotation: 0 } },
          y: { beginAtZero: true, ticks: { precision: 0 }, title: { display: true, text: 'per minute' } } },
        plugins: {
          legend: { position: 'bottom', labels: { boxWidth: 12 } },
          tooltip: { callbacks: {
            title: (items) => items.length ? `${P.keys[items[0].dataIndex].slice(0, 16).replace('T', ' ')} UTC` : '',
            afterBody: (items) => {
              if (!items.length) return [];
              const by = P.perProvider[items[0].dataIndex] || {};
              return Object.keys(by).sort().map((p) => `${p}: ${by[p].applied} applied, ${by[p].deadlettered} dead`);
            },
          } },
        },
      },
    });
    api.pipeline = P.chart;
  }
  function onChange(c) {  // a change of the live stream counts at once into its minute, until the trends say
    if (!c || !c.committedAt || !P.minutes.size || c.late) return;
    const k = minuteOf(c.committedAt);
    const m = P.minutes.get(k);
    if (!m) return;
    const local = m.local || (m.local = {});
    local.applied = (local.applied || 0) + 1;
    local.byProvider = local.byProvider || {};
    local.byProvider[c.provider] = (local.byProvider[c.provider] || 0) + 1;
    clearTimeout(P.redraw);
    P.redraw = setTimeout(drawPipeline, 250);
  }
  function onSnapshot(asOf) {
    if (!P.minutes.size) { loadTrends(`${HOURS}h`); return; }
    // The sweep wrote the trends with this snapshot: its current minute (whose document also holds the minute
    // before's final counts) is all a page that keeps up reads, one document; one that fell behind (a hidden
    // tab) reads from the newest minute it had not seen complete.
    const current = minuteOf(asOf || new Date().toISOString());
    const open = P.asOf ? minuteOf(P.asOf) : [...P.minutes.keys()].sort().pop();
    const behind = Date.parse(current) - Date.parse(open) > 60000;
    loadTrends(behind ? open : current);
    if (U.shown && Date.now() - U.loadedAt >= USAGE_REFRESH_MS) loadUsage();
  }

  // ---- Usage ---------------------------------------------------------------------------------
  function monthNow() { const d = new Date(); return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}`; }
  function windowOf(month) {
    const [y, m] = month.split('-').map(Number);
    const next = m === 12 ? `${y + 1}-01` : `${y}-${pad(m + 1)}`;
    return { from: `${month}-01`, to: `${next}-01`, days: new Date(Date.UTC(y, m, 0)).getUTCDate() };
  }
  function usageQuery(format) {
    const w = windowOf(U.month);
    const q = new URLSearchParams({ from: w.from, to: w.to, by: U.by });
    if (format) q.set('format', format);
    return q;
  }
  async function loadUsage() {
    const seq = ++U.seq;
    const w = windowOf(U.month);
    $('usage-csv').href = `v1/usage?${usageQuery('csv')}`;
    $('usage-csv').setAttribute('download', `usage-${w.from}-${w.to}-${U.by}.csv`);
    note('usage-note', 'Loading…');
    let rows = [], body, token = null;
    try {
      do {
        const q = usageQuery();
        q.set('pageSize', '5000');
        if (token) q.set('pageToken', token);
        body = await getJson(`v1/usage?${q}`);
        rows = rows.concat(body.rows);
        token = body.nextPageToken;
      } while (token);
    } catch (e) {
      if (seq === U.seq) note('usage-note', `Not available: ${e.message}`);
      return;
    }
    if (seq !== U.seq) return;  // a newer choice was made meanwhile
    U.loadedAt = Date.now();
    U.rows = rows;
    U.body = body;
    drawUsage(rows, body, w);
  }
  function drawUsage(rows, body, w) {
    const column = body.column;
    const days = Array.from({ length: w.days }, (_, i) => `${U.month}-${pad(i + 1)}`);
    const groups = [...new Set(rows.map((r) => r[column] == null ? '(none)' : String(r[column])))].sort();
    const hours = new Map(groups.map((g) => [g, new Array(days.length).fill(0)]));
    for (const r of rows) {
      const i = days.indexOf(r.day);
      if (i >= 0) hours.get(r[column] == null ? '(none)' : String(r[column]))[i] += r.hours;
    }
    const total = rows.reduce((a, r) => a + r.hours, 0);
    note('usage-note', rows.length ? '' : `No billable usage in ${U.month}.`);
    $('usage-total').textContent = `${total.toLocaleString(undefined, { maximumFractionDigits: 3 })} resource-hours`;
    $('usage-total').dataset.hours = String(total);
    $('usage-counted').textContent = `counted until ${String(body.countedUntil).slice(0, 16).replace('T', ' ')} UTC`;
    const data = {
      labels: days.map((d) => d.slice(8)),
      datasets: groups.map((g, i) => ({ label: g, data: hours.get(g), backgroundColor: colour(i), stack: 'usage' })),
    };
    if (U.chart) { U.chart.data = data; U.chart.update('none'); } else {
      U.chart = new window.Chart($('usage-chart'), {
        type: 'bar', data,
        options: {
          responsive: true, maintainAspectRatio: false, animation: false,
          interaction: { mode: 'index', intersect: false },
          scales: { x: { stacked: true, ticks: { maxRotation: 0, autoSkip: true } },
            y: { stacked: true, beginAtZero: true, title: { display: true, text: 'resource-hours' } } },
          plugins: { legend: { position: 'bottom', labels: { boxWidth: 12 } },
            tooltip: { callbacks: { title: (items) => items.length ? days[items[0].dataIndex] : '' } } },
        },
      });
      api.usage = U.chart;
    }
    const head = el('tr', {}, el('th', { scope: 'col' }, 'Day'), el('th', { scope: 'col' }, column),
      el('th', { scope: 'col', class: 'num' }, 'Resources'), el('th', { scope: 'col', class: 'num' }, 'Hours'));
    $('usage-rows').replaceChildren(...rows.map((r) => el('tr', { 'data-day': r.day },
      el('td', {}, r.day), el('td', {}, r[column] == null ? '(none)' : r[column]),
      el('td', { class: 'num' }, r.resources),
      el('td', { class: 'num', 'data-hours': r.hours }, r.hours.toLocaleString(undefined, { maximumFractionDigits: 3 })))));
    $('usage-head').replaceChildren(head);
  }
  function showUsage(query) {
    U.shown = true;
    const month = query.get('month');
    const by = query.get('by');
    U.month = month && /^\d{4}-\d{2}$/.test(month) ? month : monthNow();
    U.by = by === 'tenant' ? 'tenant' : 'provider';
    $('usage-month').value = U.month;
    $('usage-month').max = monthNow();
    $('usage-by').value = U.by;
    loadUsage();
  }
  function hideUsage() { U.shown = false; }
  function choose() {
    const month = $('usage-month').value || monthNow();
    location.hash = `#/usage?month=${encodeURIComponent(month)}&by=${encodeURIComponent($('usage-by').value)}`;
  }
  function start(read) {
    getJson = read;
    $('usage-month').addEventListener('change', choose);
    $('usage-by').addEventListener('change', choose);
    loadTrends(`${HOURS}h`);
  }

  const api = { start, onSnapshot, onChange, showUsage, hideUsage, pipeline: null, usage: null,
    get usageRows() { return U.rows; }, get trends() { return P.minutes; } };
  window.dcmCharts = api;
})();
