// The Kubernetes API as the dashboard uses it: requests with the user's bearer token, and
// list-then-watch streams that resume from the last resourceVersion they saw.

export class Api {
  constructor(base, token) {
    this.base = base;
    this.token = token;
  }

  headers() {
    return { Authorization: `Bearer ${this.token}`, Accept: 'application/json' };
  }

  async get(path, signal) {
    const response = await fetch(this.base + path, { headers: this.headers(), signal });
    let body = null;
    try { body = await response.json(); } catch { body = null; }
    return { status: response.status, ok: response.ok, body };
  }

  async post(path, payload, signal) {
    const response = await fetch(this.base + path, {
      method: 'POST', signal, body: JSON.stringify(payload),
      headers: { ...this.headers(), 'Content-Type': 'application/json' },
    });
    let body = null;
    try { body = await response.json(); } catch { body = null; }
    return { status: response.status, ok: response.ok, body };
  }
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  signal?.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
});

function withQuery(path, query) {
  const sep = path.includes('?') ? '&' : '?';
  return path + sep + new URLSearchParams(query).toString();
}

// Lists `path`, hands the items to `on.reset`, then watches from the list's version and
// hands each change to `on.event(type, object)`. A watch that ends is resumed; a 410 (the
// server compacted past our version) lists again. `on.error(status, message)` reports a
// list the user may not read (403) or that the server does not serve (404); those are
// retried slowly, in case RBAC changes. `on.live(bool)` tells whether the stream is open.
export async function listWatch(api, path, on, signal) {
  let backoff = 1000;
  while (!signal.aborted) {
    let listed;
    try {
      listed = await api.get(path, signal);
    } catch (error) {
      if (signal.aborted) return;
      on.live?.(false);
      await sleep(backoff, signal);
      backoff = Math.min(backoff * 2, 10000);
      continue;
    }
    if (!listed.ok) {
      on.live?.(false);
      on.error?.(listed.status, listed.body?.message || `HTTP ${listed.status}`);
      await sleep(listed.status === 401 ? 3600000 : 30000, signal);
      continue;
    }
    backoff = 1000;
    on.reset(listed.body.items || []);
    let version = listed.body.metadata?.resourceVersion || '0';
    let relist = false;
    while (!signal.aborted && !relist) {
      const url = api.base + withQuery(path, {
        watch: '1', resourceVersion: version, allowWatchBookmarks: 'true',
        timeoutSeconds: '300',
      });
      let response;
      try {
        response = await fetch(url, { headers: api.headers(), signal });
      } catch {
        if (signal.aborted) return;
        relist = true;
        break;
      }
      if (!response.ok || !response.body) { relist = true; break; }
      on.live?.(true);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffered = '';
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffered += value;
          let newline;
          while ((newline = buffered.indexOf('\n')) >= 0) {
            const line = buffered.slice(0, newline).trim();
            buffered = buffered.slice(newline + 1);
            if (!line) continue;
            const change = JSON.parse(line);
            const object = change.object || {};
            if (change.type === 'ERROR') { relist = true; break; }
            if (object.metadata?.resourceVersion) version = object.metadata.resourceVersion;
            if (change.type !== 'BOOKMARK') on.event(change.type, object);
          }
          if (relist) break;
        }
      } catch {
        if (signal.aborted) return;
        relist = true;
      }
      on.live?.(false);
    }
    if (relist) await sleep(500, signal);
  }
}
