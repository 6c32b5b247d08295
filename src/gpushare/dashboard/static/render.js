// Drawing: API-derived rows (model.js) into DOM nodes. Text goes in as text, never as HTML.
import { barChart, stepChart } from './charts.js';
import { ago, gpus, mib } from './model.js';

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'style') Object.assign(node.style, value);
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function pct(value, scale) {
  if (value === undefined || !(scale > 0)) return '0%';
  return `${Math.max(0, Math.min(100, (value / scale) * 100)).toFixed(2)}%`;
}

export function notice(text) {
  return el('p', { class: 'notice' }, text);
}

const UNITS = 'GPUs: 1 = one whole GPU; 340m = 340 milli-GPU = 0.34 of a GPU';

// The queue tree, every bar drawn against the cluster's GPUs (`capacity`), so a team's
// bar is its part of the whole cluster. Quota is a tick under the bar, fair share a
// marker over it: equal values stay legible.
export function queuesView(rows, colours, capacity) {
  if (!rows.length) return notice('No queues.');
  const scale = Math.max(capacity || 0, ...rows.filter((r) => !r.depth).map((r) => r.allocated)) || 1;
  const legend = el('div', { class: 'legend' },
    el('span', { class: 'key allocated' }, 'allocated (queue colour)'),
    el('span', { class: 'key requested' }, 'requested'),
    el('span', { class: 'key quota' }, 'quota'),
    el('span', { class: 'key fair' }, 'fair share'),
    el('span', { class: 'units', 'data-units': '' }, `bars span the cluster's ${gpus(scale)} GPU(s) · ${UNITS}`));
  const table = el('div', { class: 'queue-table', dataset: { scale: String(scale) } });
  for (const r of rows) {
    const c = colours.get(r.name);
    const bar = el('div', { class: 'bar', title: `${r.name}: allocated ${gpus(r.allocated)} of ${gpus(scale)} GPU(s)` },
      el('div', { class: 'requested', style: { width: pct(r.requested, scale) } }),
      el('div', { class: 'allocated', style: { width: pct(r.allocated, scale), background: c } }),
      el('div', { class: 'quota-mark', style: { left: pct(r.quota, scale) },
        title: `quota ${gpus(r.quota)}` }),
      r.fairShare !== undefined && el('div', { class: 'fair-mark',
        style: { left: pct(r.fairShare, scale) }, title: `fair share ${gpus(r.fairShare)}` }));
    table.append(el('div', { class: 'queue', dataset: { queue: r.name, colour: c } },
      el('span', { class: 'name', style: { paddingLeft: `${r.depth * 1.2}em` } },
        el('span', { class: 'dot', style: { background: c } }), r.name),
      bar,
      el('span', { class: 'figure allocated-value', title: 'allocated' }, gpus(r.allocated)),
      el('span', { class: 'figure fair-value', title: 'fair share' }, gpus(r.fairShare)),
      el('span', { class: 'figure quota-value', title: 'quota' }, gpus(r.quota)),
      el('span', { class: 'figure requested-value', title: 'requested' }, gpus(r.requested)),
      el('span', { class: 'figure limit-value', title: 'limit' }, gpus(r.limit))));
  }
  const head = el('div', { class: 'queue head' }, el('span', {}, 'queue'), el('span', {}, ''),
    el('span', {}, 'allocated'), el('span', {}, 'fair share'), el('span', {}, 'quota'),
    el('span', {}, 'requested'), el('span', {}, 'limit'));
  return el('div', {}, legend, head, table);
}

function measuredText(node, gpu) {
  if (node.declared) return 'declared GPUs: use not measured';
  if (gpu.usedMiB === undefined) return 'use not reported yet';
  const granted = gpu.slices.reduce((a, s) => a + (s.memoryMiB || 0), 0);
  return `used ${mib(gpu.usedMiB)} of ${mib(granted)} granted` +
    (gpu.smUtil !== undefined ? ` · SM ${gpu.smUtil}%` : '');
}

// Inside a tenant: the team's share of each node's GPUs, not the node's slices.
function tenantNode(node) {
  const whole = node.gpus.length;
  return el('div', { class: 'tenant-share', dataset: { share: gpus(node.tenantShare) } },
    el('div', { class: 'gpu-bar', title: `your share ${gpus(node.tenantShare)} of ${whole} GPU(s)` },
      el('div', { class: 'slice held', style: { width: pct(node.tenantHeld, whole) } },
        (node.tenantHeld || 0) / Math.max(1, whole) >= 0.12 ? `held ${gpus(node.tenantHeld)}` : ''),
      el('div', { class: 'slice room', style: { width: pct(Math.max(0, node.tenantShare - (node.tenantHeld || 0)), whole) } },
        (node.tenantShare - (node.tenantHeld || 0)) / Math.max(1, whole) >= 0.12 ? 'room' : '')),
    el('span', { class: 'gpu-free' }, `your share: ${gpus(node.tenantShare)} of ${whole} GPU${whole === 1 ? '' : 's'}`));
}

export function nodesView(board, colourBy, colours) {
  if (!board.length) return notice('No nodes.');
  return el('div', { class: 'nodes' }, board.map((node) => el('div',
    { class: `node${node.ready ? '' : ' not-ready'}`, dataset: { node: node.name } },
    el('div', { class: 'node-head' },
      el('strong', {}, node.name), ` ${node.gpus.length}× ${node.product}`,
      el('span', { class: 'enforcement' }, node.enforcement ? ` · ${node.enforcement}` : ''),
      node.declared ? el('span', { class: 'declared' }, ' · declared GPUs: use not measured') : '',
      node.ready ? '' : el('span', { class: 'error' }, ' · not ready')),
    node.tenantShare !== undefined ? tenantNode(node)
      : node.gpus.length ? node.gpus.map((gpu) => el('div', { class: 'gpu', dataset: { gpu: gpu.index } },
        el('span', { class: 'gpu-label' }, `GPU ${gpu.index}`),
        el('div', { class: 'gpu-bar' }, gpu.slices.map((s) => {
          const owner = colourBy === 'tenant' && s.tenant ? s.tenant : s.queue;
          const tip = [`${s.pod}`, `queue ${s.queue}${s.tenant ? ` · tenant ${s.tenant}` : ''}`,
            `fraction ${s.portion}`, `memory granted ${mib(s.memoryMiB)}`,
            `memory used ${node.declared ? 'not measured (declared GPU)' : s.usedMiB === undefined ? 'not reported' : mib(s.usedMiB)}`].join('\n');
          return el('div', {
            class: `slice${s.deleting ? ' deleting' : ''}`, 'data-tip': tip,
            dataset: { pod: s.pod, queue: s.queue, portion: s.portion, colour: colours.get(owner) },
            style: { width: pct(s.portion, 1), background: colours.get(owner) },
          }, s.portion >= 0.12 ? `${s.queue} ${gpus(s.portion)}` : '');
        })),
        el('span', { class: 'gpu-free' },
          `${gpus(Math.max(0, 1 - gpu.slices.reduce((a, s) => a + s.portion, 0)))} free`),
        el('span', { class: 'gpu-use', dataset: { measured: String(!node.declared && gpu.usedMiB !== undefined) } },
          measuredText(node, gpu))))
        : notice('no GPUs'))));
}

export function pendingView(groups, colours, now) {
  if (!groups.length) return notice('Nothing is waiting.');
  return el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'pod group'), el('th', {}, 'pods'),
    el('th', {}, 'queue'), el('th', {}, 'each asks'), el('th', {}, 'waiting'), el('th', {}, "scheduler's reason"))),
  el('tbody', {}, groups.map((g) => el('tr', { dataset: { group: g.group, pod: g.pods[0], count: g.count } },
    el('td', { title: g.pods.join('\n') }, g.group), el('td', { class: 'count' }, String(g.count)),
    el('td', {}, el('span', { class: 'dot', style: { background: colours.get(g.queue) } }), g.queue),
    el('td', {}, g.asks), el('td', { class: 'age', title: g.since }, ago(g.since, now).replace(' ago', '')),
    el('td', { class: 'reason' }, g.reason)))));
}

export function timelineView(rows, now) {
  if (!rows.length) return notice('No decisions to show.');
  return el('ol', { class: 'timeline' }, rows.map((r) => {
    let text;
    if (r.reason === 'Evict') {
      text = [el('strong', {}, r.action || 'evicted'), ` took ${r.pod}`,
        r.queue && ` from queue ${r.queue}`, r.forWhom && ` for ${r.forWhom}`,
        r.why && el('span', { class: 'why' }, ` — ${r.why}`)];
    } else if (r.reason === 'Pipelined') {
      text = [el('strong', {}, 'pipelined'), ` ${r.pod}`, r.queue && ` (queue ${r.queue})`,
        el('span', { class: 'why' }, ` — ${r.message}`)];
    } else {
      text = [el('strong', {}, r.reason), ` ${r.pod}`, el('span', { class: 'why' }, ` — ${r.message}`)];
    }
    return el('li', { dataset: { reason: r.reason } },
      el('time', { datetime: r.time, title: r.time.replace('T', ' ').replace('Z', ' UTC') }, ago(r.time, now)), ' ', text,
      r.count > 1 ? el('span', { class: 'count' }, ` ×${r.count}`) : '');
  }));
}

export function tenantsView(rows, error, colours) {
  if (error) return notice(error);
  if (!rows.length) return notice('No virtual clusters.');
  return el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'tenant'), el('th', {}, 'queues'),
    el('th', {}, 'pods'), el('th', {}, 'GPU held'), el('th', {}, 'state'))),
  el('tbody', {}, rows.map((r) => el('tr', { dataset: { tenant: r.name } },
    el('td', {}, el('span', { class: 'dot', style: { background: colours.get(r.name) } }), r.name),
    el('td', {}, r.queues), el('td', {}, r.pods), el('td', {}, gpus(r.gpu)),
    el('td', {}, r.paused ? 'paused' : r.phase || '')))));
}

const WAIT_LABELS = ['≤1s', '≤5s', '≤15s', '≤1m', '≤5m', '≤15m', '≤1h', '>1h'];

// History: a small chart per queue (allocated vs fair share, stepped per sample), the
// cluster's GPU use, and the distribution of waits.
export function historyView(history, rows, colours, capacity, source) {
  const samples = history.samples;
  if (samples.length < 2) return notice('Collecting history (a sample every 5 s)…');
  const t0 = samples[0].t; const t1 = samples[samples.length - 1].t;
  const minutes = Math.max(1, Math.round((t1 - t0) / 60000));
  const queues = el('div', { class: 'multiples' });
  for (const r of rows) {
    const alloc = samples.filter((s) => s.queues[r.name]).map((s) => [s.t, s.queues[r.name].allocated ?? 0]);
    const fair = samples.filter((s) => s.queues[r.name]?.fairShare !== undefined)
      .map((s) => [s.t, s.queues[r.name].fairShare]);
    const chart = stepChart([
      { points: alloc, colour: colours.get(r.name), label: 'allocated' },
      { points: fair, colour: '#e67e22', dashed: true, label: 'fair share' }],
    { t0, t1, yMax: capacity || 1, title: r.name, format: gpus, marks: [{ value: r.quota, label: 'quota' }] });
    queues.append(el('div', { class: 'multiple', dataset: { historyQueue: r.name } }, chart));
  }
  const use = stepChart([
    { points: samples.map((s) => [s.t, s.granted]), colour: '#1d2330', label: 'granted' },
    { points: samples.filter((s) => s.measured !== undefined).map((s) => [s.t, s.measured]),
      colour: '#59a14f', label: 'measured' }],
  { t0, t1, yMax: 1, title: 'GPU use: granted (dark), measured SM (green)', width: 380,
    format: (v) => `${Math.round(v * 100)}%` });
  const measured = samples.some((s) => s.measured !== undefined);
  const { counts } = history.waitHistogram();
  const waits = barChart(counts, WAIT_LABELS, { title: `wait from creation to binding (${history.waits.size} pod${history.waits.size === 1 ? '' : 's'})` });
  return el('div', {},
    el('p', { class: 'legend' }, `last ${minutes} min (${samples.length} samples, ${source}) · `,
      el('span', { class: 'key allocated' }, 'allocated'), ' ', el('span', { class: 'key fair' }, 'fair share (dashed)'),
      ' ', el('span', { class: 'key quota' }, 'quota (thin line)')),
    queues,
    el('div', { class: 'history-row' },
      el('div', { class: 'use', dataset: { measured: String(measured) } }, use,
        measured ? '' : el('p', { class: 'notice' }, 'declared GPUs: use not measured')),
      el('div', { class: 'waits', dataset: { waits: String(history.waits.size) } }, waits)));
}
