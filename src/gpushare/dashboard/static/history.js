// The board's memory of the recent past, kept in the page and bounded: per queue its
// allocation and fair share, the cluster's GPU use (granted, and measured where NVML
// reports it), and how long pods waited for the scheduler. When a Prometheus is
// configured (`?prometheus=<url>` on the page, or `gpushare.prometheus` in the session),
// the queue and use series are read from it instead, over the same span. The page may
// only talk to its own origin (its Content-Security-Policy), so the Prometheus is a path
// on this server, asked with the user's token.

export const SAMPLES = 720; // one per 5 s: an hour
export const WAITS = 2000;  // the last this many bound pods

export class History {
  constructor(limit = SAMPLES, waitLimit = WAITS) {
    this.limit = limit;
    this.waitLimit = waitLimit;
    this.samples = []; // { t, queues: {name: {allocated, fairShare}}, granted, measured, gpus }
    this.waits = new Map(); // pod -> seconds from creation to binding
  }

  // One sample of what the board shows now.
  sample(t, queueRows, board) {
    const queues = {};
    for (const r of queueRows) queues[r.name] = { allocated: r.allocated, fairShare: r.fairShare };
    let gpus = 0; let granted = 0; let measured = 0; let measuredGpus = 0;
    for (const node of board) {
      for (const gpu of node.gpus) {
        gpus += 1;
        granted += gpu.slices.reduce((a, s) => a + s.portion, 0);
        if (gpu.smUtil !== undefined) { measured += gpu.smUtil / 100; measuredGpus += 1; }
      }
    }
    this.samples.push({
      t, queues, gpus,
      granted: gpus ? Math.min(1, granted / gpus) : 0,
      measured: measuredGpus ? measured / measuredGpus : undefined,
    });
    if (this.samples.length > this.limit) this.samples.splice(0, this.samples.length - this.limit);
  }

  // Bound pods' waits (a Map pod -> seconds); the oldest go past the bound.
  addWaits(waits) {
    for (const [pod, seconds] of waits) {
      if (this.waits.has(pod)) continue;
      this.waits.set(pod, seconds);
      if (this.waits.size > this.waitLimit) this.waits.delete(this.waits.keys().next().value);
    }
  }

  // Wait times as counts per bucket (upper bounds in seconds; the last is open).
  waitHistogram(bounds = [1, 5, 15, 60, 300, 900, 3600]) {
    const counts = new Array(bounds.length + 1).fill(0);
    for (const s of this.waits.values()) {
      const i = bounds.findIndex((b) => s <= b);
      counts[i < 0 ? bounds.length : i] += 1;
    }
    return { bounds, counts };
  }
}

// Prometheus' range query for the same series, when one is configured: the samples as
// History keeps them. Returns undefined when the server cannot be read.
export async function fromPrometheus(api, path, end, span, step = 15) {
  const range = async (query) => {
    const q = new URLSearchParams({ query, start: String(end - span), end: String(end), step: String(step) });
    const response = await fetch(`${window.location.origin}${path.replace(/\/$/, '')}/api/v1/query_range?${q}`,
      { headers: api.headers() });
    if (!response.ok) throw new Error(`Prometheus: HTTP ${response.status}`);
    return (await response.json()).data?.result || [];
  };
  try {
    const [alloc, fair, use] = await Promise.all([
      range('kai_queue_allocated_gpus'), range('kai_queue_fair_share_gpu'),
      range('sum(gpushare_gpu_allocated_portion) / count(gpushare_gpu_allocated_portion)')]);
    const byTime = new Map();
    const at = (t) => {
      if (!byTime.has(t)) byTime.set(t, { t: t * 1000, queues: {}, granted: 0, measured: undefined, gpus: 0 });
      return byTime.get(t);
    };
    for (const [series, field] of [[alloc, 'allocated'], [fair, 'fairShare']]) {
      for (const s of series) {
        const name = s.metric.queue_name;
        for (const [t, v] of s.values) {
          const row = at(t);
          row.queues[name] = { ...(row.queues[name] || {}), [field]: Number(v) };
        }
      }
    }
    for (const s of use) for (const [t, v] of s.values) at(t).granted = Number(v);
    return [...byTime.values()].sort((a, b) => a.t - b.t);
  } catch {
    return undefined;
  }
}
