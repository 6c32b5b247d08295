// Pure functions from API objects to what the dashboard draws (no DOM here).

const SUFFIX = {
  m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12,
  Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4,
};

// A Kubernetes quantity ("330m", "1", "2Gi") as a number; undefined when absent.
export function quantity(text) {
  if (text === undefined || text === null || text === '') return undefined;
  if (typeof text === 'number') return text;
  const m = /^([+-]?[0-9.]+(?:e[+-]?[0-9]+)?)([a-zA-Z]*)$/.exec(String(text).trim());
  if (!m) return undefined;
  const scale = m[2] ? SUFFIX[m[2]] : 1;
  return scale === undefined ? undefined : Number(m[1]) * scale;
}

// GPUs the way `kubectl get queues` shows them: whole numbers plain, else milli-GPUs.
export function gpus(value) {
  if (value === undefined || Number.isNaN(value)) return '–';
  if (value < 0) return 'unlimited';
  const milli = Math.round(value * 1000);
  return milli % 1000 === 0 ? String(milli / 1000) : `${milli}m`;
}

export function mib(value) {
  if (value === undefined) return '–';
  return value >= 1024 ? `${(value / 1024).toFixed(1)} GiB` : `${Math.round(value)} MiB`;
}

const GPU = 'nvidia.com/gpu';

export function queueRows(queues) {
  const byName = new Map(queues.map((q) => [q.metadata.name, q]));
  const children = new Map();
  for (const q of queues) {
    const parent = q.spec?.parentQueue;
    const key = parent && byName.has(parent) ? parent : '';
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(q.metadata.name);
  }
  const rows = [];
  const walk = (parent, depth) => {
    for (const name of (children.get(parent) || []).sort()) {
      const q = byName.get(name);
      const gpu = q.spec?.resources?.gpu || {};
      const status = q.status || {};
      rows.push({
        name, depth, parent: q.spec?.parentQueue || '',
        quota: typeof gpu.quota === 'number' ? gpu.quota : 0,
        limit: typeof gpu.limit === 'number' ? gpu.limit : -1,
        weight: typeof gpu.overQuotaWeight === 'number' ? gpu.overQuotaWeight : 1,
        fairShare: quantity(status.fairShare?.[GPU]),
        allocated: quantity(status.allocated?.[GPU]) ?? 0,
        requested: quantity(status.requested?.[GPU]),
        nonPreemptible: quantity(status.allocatedNonPreemptible?.[GPU]),
      });
      walk(name, depth + 1);
    }
  };
  walk('', 0);
  return rows;
}

function json(text) {
  try { return JSON.parse(text); } catch { return undefined; }
}

const FINISHED = new Set(['Succeeded', 'Failed']);

export function queueOf(pod) {
  return pod.metadata?.labels?.['kai.scheduler/queue'] || 'default-queue';
}

export function tenantOf(pod) {
  return pod.metadata?.labels?.['tenancy.gpushare.io/tenant'] || '';
}

// Every node with its GPUs, each GPU with the slices its pods hold.
export function gpuBoard(nodes, pods) {
  const byNode = new Map();
  for (const pod of pods) {
    const node = pod.spec?.nodeName;
    if (!node || FINISHED.has(pod.status?.phase)) continue;
    const ann = pod.metadata?.annotations || {};
    const indices = (ann['gpushare.io/gpu-indices'] || '').split(',').filter((x) => x !== '');
    if (!indices.length) continue;
    const portion = Number(ann['gpushare.io/gpu-portion'] || '1');
    const usage = json(ann['gpushare.io/gpu-usage'] || '') || {};
    const used = new Map((usage.gpus || []).map((g) => [String(g.index), g.memoryMiB]));
    for (const index of indices) {
      if (!byNode.has(node)) byNode.set(node, []);
      byNode.get(node).push({
        gpu: index, pod: `${pod.metadata.namespace}/${pod.metadata.name}`,
        queue: queueOf(pod), tenant: tenantOf(pod), portion,
        memoryMiB: Number(ann['gpushare.io/gpu-memory-mib'] || '0') || undefined,
        usedMiB: used.get(index),
        deleting: Boolean(pod.metadata.deletionTimestamp),
      });
    }
  }
  return nodes.map((node) => {
    const labels = node.metadata?.labels || {};
    const ann = node.metadata?.annotations || {};
    const parsed = json(ann['gpushare.io/gpus'] || '');
    const inventory = Array.isArray(parsed) ? parsed : [];
    // Inside a tenant, the node view's GPU figure is the team's share ("330m"), and the
    // node's whole count is in `tenancy.gpushare.io/node-gpus` ("1").
    const share = quantity(ann['tenancy.gpushare.io/gpu-share']);
    const capacity = quantity(node.status?.capacity?.[GPU]);
    const whole = share !== undefined ? quantity(ann['tenancy.gpushare.io/node-gpus']) ?? 0 : capacity;
    const count = Math.max(0, Math.round(whole ?? inventory.length ?? 0));
    const measured = json(ann['gpushare.io/gpu-usage'] || '') || {};
    const usedOf = new Map((measured.gpus || []).map((g) => [String(g.index), g]));
    const slices = byNode.get(node.metadata.name) || [];
    const ready = (node.status?.conditions || []).find((c) => c.type === 'Ready')?.status;
    const gpuList = [];
    for (let i = 0; i < count; i += 1) {
      const inv = inventory.find((g) => Number(g.index) === i) || {};
      const use = usedOf.get(String(i));
      gpuList.push({
        index: String(i), memoryMiB: inv.memoryMiB || Number(labels['nvidia.com/gpu.memory'] || 0),
        slices: slices.filter((s) => s.gpu === String(i)).sort((a, b) => a.pod.localeCompare(b.pod)),
        usedMiB: use?.memoryMiB, smUtil: use?.smUtil,
      });
    }
    return {
      name: node.metadata.name, product: labels['nvidia.com/gpu.product'] || '',
      enforcement: ann['gpushare.io/enforcement'] || '',
      declared: ann['gpushare.io/gpus-declared'] === 'true',
      measured: usedOf.size > 0,
      tenantShare: share, tenantHeld: quantity(ann['tenancy.gpushare.io/gpu-allocated']),
      ready: ready === 'True', gpus: gpuList,
    };
  }).sort((a, b) => a.name.localeCompare(b.name));
}

const SCHEDULERS = new Set(['gpushare', 'kai-scheduler']);

function eventTime(e) {
  return e.lastTimestamp || e.eventTime || e.firstTimestamp || e.metadata?.creationTimestamp || '';
}

// What is waiting, one row per pod group (a gang of three is one row of three), with the
// latest reason any of its pods was given and the age of its oldest pod.
export function pendingGroups(pods, events) {
  const groups = new Map();
  for (const row of pendingRows(pods, events)) {
    const have = groups.get(row.group);
    if (!have) {
      groups.set(row.group, { ...row, pods: [row.pod], reasonTime: row.reasonTime });
      continue;
    }
    have.pods.push(row.pod);
    if (row.since && (!have.since || row.since < have.since)) have.since = row.since;
    if (row.reasonTime > have.reasonTime) { have.reason = row.reason; have.reasonTime = row.reasonTime; }
  }
  return [...groups.values()].map((g) => ({ ...g, count: g.pods.length }))
    .sort((a, b) => a.queue.localeCompare(b.queue) || a.group.localeCompare(b.group));
}

// Pods waiting for the scheduler, with its latest reason (from the Unschedulable events).
export function pendingRows(pods, events) {
  const reasons = new Map();
  for (const e of events) {
    if (e.reason !== 'Unschedulable' || e.involvedObject?.kind !== 'Pod') continue;
    const key = `${e.involvedObject.namespace}/${e.involvedObject.name}`;
    const have = reasons.get(key);
    if (!have || eventTime(e) >= have.time) reasons.set(key, { time: eventTime(e), text: e.message });
  }
  return pods
    .filter((p) => !p.spec?.nodeName && SCHEDULERS.has(p.spec?.schedulerName)
      && !FINISHED.has(p.status?.phase) && !p.metadata.deletionTimestamp)
    .map((p) => {
      const key = `${p.metadata.namespace}/${p.metadata.name}`;
      const ann = p.metadata.annotations || {};
      // Its pod group; else its controller (a Job's pods are one workload), else itself.
      const owner = (p.metadata.ownerReferences || []).find((o) => o.controller);
      const group = ann['pod-group-name'] || ann['scheduling.k8s.io/group-name']
        || (owner ? `${owner.kind.toLowerCase()}/${owner.name}` : '');
      return {
        pod: key, group: group ? `${p.metadata.namespace}/${group}` : key,
        reasonTime: reasons.get(key)?.time || '',
        queue: queueOf(p), since: p.metadata.creationTimestamp || '',
        asks: ann['gpu-fraction'] ? `${ann['gpu-fraction']} GPU`
          : ann['gpu-memory'] ? `${ann['gpu-memory']} MiB GPU`
            : (p.spec?.containers || []).map((c) => c.resources?.limits?.[GPU]).filter(Boolean)
              .map((n) => `${n} GPU`).join(', ') || 'no GPU',
        reason: reasons.get(key)?.text || 'not decided yet',
      };
    })
    .sort((a, b) => a.queue.localeCompare(b.queue) || a.pod.localeCompare(b.pod));
}

const DECISIONS = new Set(['Evict', 'Pipelined', 'GPUMemoryExceeded', 'FailedBinding',
  'Scheduled']);

// The scheduler's and the watchdog's decisions, newest first: who lost what, for whom, why.
export function timelineRows(events, podQueues, limit = 60) {
  const rows = [];
  for (const e of events) {
    if (!DECISIONS.has(e.reason)) continue;
    const obj = e.involvedObject || {};
    const pod = `${obj.namespace}/${obj.name}`;
    const row = { time: eventTime(e), reason: e.reason, pod, queue: podQueues.get(pod) || '',
      message: e.message || '', count: e.count || 1, action: '', forWhom: '', why: '' };
    // "evicted by reclaim: <why> (from queue nlp for queue vision: default/p; ...)"
    const m = /^evicted by ([a-z]+): (.*?)(?: \(from queue (\S+?)(?: for (.*))?\))?$/.exec(row.message);
    if (e.reason === 'Evict' && m) {
      [, row.action, row.why] = m;
      if (m[3] && m[3] !== '?') row.queue = m[3];
      row.forWhom = m[4] || '';
    }
    rows.push(row);
  }
  rows.sort((a, b) => (a.time < b.time ? 1 : a.time > b.time ? -1 : 0));
  return rows.slice(0, limit);
}

export function tenantRows(virtualClusters, pods) {
  return virtualClusters.map((vc) => {
    const name = vc.metadata.name;
    const mine = pods.filter((p) => tenantOf(p) === name && !FINISHED.has(p.status?.phase));
    let gpu = 0;
    for (const p of mine) {
      const ann = p.metadata.annotations || {};
      const n = (ann['gpushare.io/gpu-indices'] || '').split(',').filter((x) => x !== '').length;
      if (p.spec?.nodeName) gpu += n * Number(ann['gpushare.io/gpu-portion'] || '1');
    }
    return {
      name, queues: (vc.spec?.queues || []).join(', '), phase: vc.status?.phase || '',
      pods: mine.length, gpu, paused: vc.spec?.paused === true,
    };
  }).sort((a, b) => a.name.localeCompare(b.name));
}

// Well-separated colours (readable under white text), then golden-angle hues past them.
const PALETTE = ['#4e79a7', '#e15759', '#59a14f', '#b07aa1', '#76b7b2', '#9c755f',
  '#d37295', '#499894', '#8cd17d', '#6b8e23', '#5f4b8b', '#86bcb6'];

function nth(i) {
  return i < PALETTE.length ? PALETTE[i] : `hsl(${Math.round((i * 137.508) % 360)} 55% 45%)`;
}

// A distinct colour per queue: assigned level by level (the top queues first, then their
// children in tree order), each new queue the next colour, so no two queues share one and
// no child ever has its parent's.
export function queueColours(rows) {
  const out = new Map();
  const depth = Math.max(0, ...rows.map((r) => r.depth));
  let next = 0;
  for (let d = 0; d <= depth; d += 1) {
    for (const r of rows) if (r.depth === d && !out.has(r.name)) out.set(r.name, nth(next++));
  }
  return out;
}

// A distinct colour per tenant (sorted by name), from the far end of the palette.
export function tenantColours(names) {
  const out = new Map();
  [...new Set(names)].sort().forEach((n, i) => out.set(n, nth(PALETTE.length - 1 - (i % PALETTE.length))));
  return out;
}

// The GPUs of the cluster (what the queue bars are drawn against).
export function clusterGpus(nodes) {
  let total = 0;
  for (const n of nodes) {
    const ann = n.metadata?.annotations || {};
    const v = ann['tenancy.gpushare.io/gpu-share'] !== undefined
      ? quantity(ann['tenancy.gpushare.io/node-gpus']) : quantity(n.status?.capacity?.[GPU]);
    total += v || 0;
  }
  return total;
}

// "3m ago" for an RFC 3339 time, against `now` (ms since the epoch).
export function ago(iso, now) {
  const t = Date.parse(iso || '');
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

// Seconds each bound pod waited: creation to its PodScheduled=True condition.
export function waitTimes(pods) {
  const out = new Map();
  for (const p of pods) {
    const cond = (p.status?.conditions || []).find((c) => c.type === 'PodScheduled' && c.status === 'True');
    const created = Date.parse(p.metadata?.creationTimestamp || '');
    const bound = Date.parse(cond?.lastTransitionTime || '');
    if (!Number.isNaN(created) && !Number.isNaN(bound) && SCHEDULERS.has(p.spec?.schedulerName)) {
      out.set(`${p.metadata.namespace}/${p.metadata.name}/${p.metadata.uid || ''}`, Math.max(0, (bound - created) / 1000));
    }
  }
  return out;
}
