// Drawing: API-derived rows (model.js) into DOM nodes. Text goes in as text, never as HTML.
import { colour, gpus, mib } from './model.js';

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

export function queuesView(rows) {
  if (!rows.length) return notice('No queues.');
  const scale = Math.max(1, ...rows.map((r) => Math.max(r.quota, r.allocated,
    r.requested || 0, r.fairShare || 0, r.limit > 0 ? r.limit : 0)));
  const legend = el('div', { class: 'legend' },
    el('span', { class: 'key allocated' }, 'allocated'),
    el('span', { class: 'key requested' }, 'requested'),
    el('span', { class: 'key quota' }, 'quota'),
    el('span', { class: 'key fair' }, 'fair share'));
  const table = el('div', { class: 'queue-table' });
  for (const r of rows) {
    const bar = el('div', { class: 'bar', title: `${r.name}: allocated ${gpus(r.allocated)}` },
      el('div', { class: 'requested', style: { width: pct(r.requested, scale) } }),
      el('div', { class: 'allocated', style: { width: pct(r.allocated, scale),
        background: colour(r.name) } }),
      el('div', { class: 'quota-mark', style: { left: pct(r.quota, scale) },
        title: `quota ${gpus(r.quota)}` }),
      r.fairShare !== undefined && el('div', { class: 'fair-mark',
        style: { left: pct(r.fairShare, scale) }, title: `fair share ${gpus(r.fairShare)}` }));
    table.append(el('div', { class: 'queue', dataset: { queue: r.name } },
      el('span', { class: 'name', style: { paddingLeft: `${r.depth * 1.2}em` } }, r.name),
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

export function nodesView(board, colourBy) {
  if (!board.length) return notice('No nodes.');
  return el('div', { class: 'nodes' }, board.map((node) => el('div',
    { class: `node${node.ready ? '' : ' not-ready'}`, dataset: { node: node.name } },
    el('div', { class: 'node-head' },
      el('strong', {}, node.name), ` ${node.gpus.length}× ${node.product}`,
      el('span', { class: 'enforcement' }, node.enforcement ? ` · ${node.enforcement}` : ''),
      node.ready ? '' : el('span', { class: 'error' }, ' · not ready')),
    node.gpus.length ? node.gpus.map((gpu) => el('div', { class: 'gpu', dataset: { gpu: gpu.index } },
      el('span', { class: 'gpu-label' }, `GPU ${gpu.index}`),
      el('div', { class: 'gpu-bar' }, gpu.slices.map((s) => {
        const owner = colourBy === 'tenant' && s.tenant ? s.tenant : s.queue;
        const tip = [`${s.pod}`, `queue ${s.queue}${s.tenant ? ` · tenant ${s.tenant}` : ''}`,
          `fraction ${s.portion}`, `memory granted ${mib(s.memoryMiB)}`,
          `memory used ${s.usedMiB === undefined ? 'not measured' : mib(s.usedMiB)}`].join('\n');
        return el('div', {
          class: `slice${s.deleting ? ' deleting' : ''}`, 'data-tip': tip,
          dataset: { pod: s.pod, queue: s.queue, portion: s.portion },
          style: { width: pct(s.portion, 1), background: colour(owner) },
        }, s.portion >= 0.12 ? `${s.queue} ${gpus(s.portion)}` : '');
      })),
      el('span', { class: 'gpu-free' },
        `${gpus(Math.max(0, 1 - gpu.slices.reduce((a, s) => a + s.portion, 0)))} free`)))
      : notice('no GPUs'))));
}

export function pendingView(rows) {
  if (!rows.length) return notice('Nothing is waiting.');
  return el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'pod'), el('th', {}, 'queue'),
    el('th', {}, 'asks'), el('th', {}, "scheduler's reason"))),
  el('tbody', {}, rows.map((r) => el('tr', { dataset: { pod: r.pod } },
    el('td', {}, r.pod), el('td', {}, el('span', { class: 'dot', style: { background: colour(r.queue) } }), r.queue),
    el('td', {}, r.asks), el('td', { class: 'reason' }, r.reason)))));
}

export function timelineView(rows) {
  if (!rows.length) return notice('No decisions yet.');
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
      el('time', {}, r.time.replace('T', ' ').replace('Z', '')), ' ', text,
      r.count > 1 ? el('span', { class: 'count' }, ` ×${r.count}`) : '');
  }));
}

export function tenantsView(rows, error) {
  if (error) return notice(error);
  if (!rows.length) return notice('No virtual clusters.');
  return el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'tenant'), el('th', {}, 'queues'),
    el('th', {}, 'pods'), el('th', {}, 'GPU held'), el('th', {}, 'state'))),
  el('tbody', {}, rows.map((r) => el('tr', { dataset: { tenant: r.name } },
    el('td', {}, el('span', { class: 'dot', style: { background: colour(r.name) } }), r.name),
    el('td', {}, r.queues), el('td', {}, r.pods), el('td', {}, gpus(r.gpu)),
    el('td', {}, r.paused ? 'paused' : r.phase || '')))));
}
