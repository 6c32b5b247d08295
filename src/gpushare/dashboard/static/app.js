// The dashboard: log in with a token, list+watch what the board shows, redraw on change.
import { Api, listWatch } from './api.js';
import { History, fromPrometheus } from './history.js';
import {
  clusterGpus, gpuBoard, pendingGroups, queueColours, queueOf, queueRows, tenantColours, tenantRows,
  timelineRows, waitTimes,
} from './model.js';
import {
  el, historyView, nodesView, notice, pendingView, queuesView, tenantsView, timelineView,
} from './render.js';

const TOKEN_KEY = 'gpushare.token';
const SOURCES = {
  queues: '/apis/scheduling.run.ai/v2/queues',
  nodes: '/api/v1/nodes',
  pods: '/api/v1/pods',
  events: '/api/v1/events',
  virtualclusters: '/apis/tenancy.gpushare.io/v1alpha1/virtualclusters',
};

// The page's logical cluster: the host (/dashboard) or a tenant (/clusters/<name>/dashboard).
const TENANT = /^\/clusters\/([a-z0-9-]+)\/dashboard/.exec(window.location.pathname)?.[1] || '';

function apiBase() {
  return window.location.origin + (TENANT ? `/clusters/${TENANT}` : '');
}

const SAMPLE_MS = 5000;

// A token pasted as is, or the token of a pasted kubeconfig (its current user's, else
// the first user's that has one).
export function tokenFrom(text) {
  const trimmed = text.trim();
  if (!trimmed.includes('\n') && !trimmed.includes(':')) return trimmed;
  const tokens = [...trimmed.matchAll(/^\s*token:\s*["']?([^"'\s]+)["']?\s*$/gm)].map((m) => m[1]);
  return tokens[0] || '';
}

const state = {
  stores: Object.fromEntries(Object.keys(SOURCES).map((k) => [k, new Map()])),
  errors: {},
  live: {},
  colourBy: 'queue',
  hideScheduled: true,
  tenant: TENANT,
  who: '',
  history: new History(),
  historySource: 'kept in this page',
};
window.gpushareDashboard = state; // for tests and the curious: what the page holds
let controller = null;
let scheduled = false;

function key(obj) {
  return `${obj.metadata?.namespace || ''}/${obj.metadata?.name}`;
}

function values(name) {
  return [...state.stores[name].values()];
}

function section(id, content) {
  const body = document.querySelector(`#${id} .body`);
  body.replaceChildren(content);
}

function forbidden(name) {
  const err = state.errors[name];
  if (!err) return null;
  return err.status === 403 ? `Your RBAC does not allow listing ${name}: ${err.message}`
    : err.status === 404 ? `This server does not serve ${name}.` : `${name}: ${err.message}`;
}

function checkbox(id, label, checked, onChange) {
  const box = el('input', { type: 'checkbox', id, checked });
  box.addEventListener('change', (e) => { onChange(e.target.checked); redraw(); });
  return el('label', { class: 'toggle' }, box, ` ${label}`);
}

function draw() {
  scheduled = false;
  const now = Date.now();
  const pods = values('pods');
  const events = values('events');
  const rows = queueRows(values('queues'));
  const colours = queueColours(rows);
  for (const [name, c] of tenantColours(values('virtualclusters').map((v) => v.metadata.name))) {
    if (!colours.has(name)) colours.set(name, c);
  }
  state.colours = colours;
  const capacity = clusterGpus(values('nodes'));
  section('queues', forbidden('queues') ? notice(forbidden('queues')) : queuesView(rows, colours, capacity));
  const toggle = el('label', { class: 'toggle' }, 'colour by ',
    el('select', { id: 'colour-by' }, el('option', { value: 'queue', selected: state.colourBy === 'queue' }, 'queue'),
      el('option', { value: 'tenant', selected: state.colourBy === 'tenant' }, 'tenant')));
  toggle.querySelector('select').addEventListener('change', (e) => {
    state.colourBy = e.target.value;
    redraw();
  });
  section('nodes', forbidden('nodes') ? notice(forbidden('nodes'))
    : el('div', {}, TENANT ? '' : toggle, nodesView(gpuBoard(values('nodes'), pods), state.colourBy, colours)));
  section('pending', forbidden('pods') ? notice(forbidden('pods')) : pendingView(pendingGroups(pods, events), colours, now));
  const podQueues = new Map(pods.map((p) => [key(p).replace(/^\//, ''), queueOf(p)]));
  const decisions = timelineRows(events, podQueues, 200)
    .filter((r) => !(state.hideScheduled && r.reason === 'Scheduled')).slice(0, 60);
  section('timeline', forbidden('events') ? notice(forbidden('events'))
    : el('div', {}, checkbox('hide-scheduled', 'hide Scheduled', state.hideScheduled,
      (v) => { state.hideScheduled = v; }), timelineView(decisions, now)));
  section('tenants', TENANT
    ? notice(`You are inside tenant ${TENANT}'s virtual cluster: the queues and GPUs above are your team's share.`)
    : tenantsView(tenantRows(values('virtualclusters'), pods), forbidden('virtualclusters'), colours));
  state.history.addWaits(waitTimes(pods));
  section('history', historyView(state.history, rows, colours, capacity, state.historySource));
  document.getElementById('who').textContent = state.who
    ? `logged in as ${state.who}${TENANT ? ` · tenant ${TENANT}` : ''}` : '';
  const open = Object.values(state.live).filter(Boolean).length;
  const live = document.getElementById('live');
  live.textContent = open ? `● live (${open} watches)` : '○ offline';
  live.classList.toggle('on', open > 0);
  state.drawn = (state.drawn || 0) + 1;
}

export function redraw() {
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(draw);
}

function start(token) {
  const api = new Api(apiBase(), token);
  controller = new AbortController();
  document.getElementById('login').hidden = true;
  document.getElementById('board').hidden = false;
  document.getElementById('logout').hidden = false;
  whoAmI(api);
  startHistory(api);
  for (const [name, path] of Object.entries(SOURCES)) {
    if (TENANT && name === 'virtualclusters') continue; // a tenant has none of its own
    const store = state.stores[name];
    listWatch(api, path, {
      reset(items) {
        store.clear();
        for (const item of items) store.set(key(item), item);
        delete state.errors[name];
        redraw();
      },
      event(type, obj) {
        if (type === 'DELETED') store.delete(key(obj));
        else store.set(key(obj), obj);
        redraw();
      },
      error(status, message) {
        if (status === 401) { logout('The token was refused (401).'); return; }
        state.errors[name] = { status, message };
        redraw();
      },
      live(open) { state.live[name] = open; redraw(); },
    }, controller.signal);
  }
  redraw();
}

// Who the token belongs to, as the API server sees it (SelfSubjectReview).
async function whoAmI(api) {
  const review = await api.post('/apis/authentication.k8s.io/v1/selfsubjectreviews',
    { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' }).catch(() => null);
  state.who = review?.ok ? review.body?.status?.userInfo?.username || '' : '';
  redraw();
}

function sampleNow() {
  state.history.sample(Date.now(), queueRows(values('queues')), gpuBoard(values('nodes'), values('pods')));
  redraw();
}

// The history: read from Prometheus when one is configured (a path on this server,
// `?prometheus=/...`), else sampled every 5 s in the page.
async function startHistory(api) {
  const prometheus = new URLSearchParams(window.location.search).get('prometheus')
    || sessionStorage.getItem('gpushare.prometheus');
  if (prometheus && prometheus.startsWith('/')) {
    const samples = await fromPrometheus(api, prometheus, Date.now() / 1000, 3600);
    if (samples?.length) {
      state.history.samples = samples.slice(-state.history.limit);
      state.historySource = `from Prometheus at ${prometheus}`;
    }
  }
  const timer = setInterval(sampleNow, SAMPLE_MS);
  controller.signal.addEventListener('abort', () => clearInterval(timer), { once: true });
  setTimeout(sampleNow, 500);
}

function logout(message = '') {
  controller?.abort();
  state.history = new History();
  sessionStorage.removeItem(TOKEN_KEY);
  for (const store of Object.values(state.stores)) store.clear();
  document.getElementById('board').hidden = true;
  document.getElementById('logout').hidden = true;
  document.getElementById('login').hidden = false;
  document.getElementById('login-error').textContent = message;
}

async function login(event) {
  event.preventDefault();
  const token = tokenFrom(document.getElementById('token').value);
  const error = document.getElementById('login-error');
  if (!token) { error.textContent = 'No token found in what was pasted.'; return; }
  const probe = await new Api(apiBase(), token).get('/api');
  if (probe.status === 401) { error.textContent = 'The token was refused (401).'; return; }
  sessionStorage.setItem(TOKEN_KEY, token);
  document.getElementById('token').value = '';
  start(token);
}

function tooltips() {
  const tip = document.getElementById('tip');
  document.addEventListener('mouseover', (e) => {
    const target = e.target.closest('[data-tip]');
    if (!target) { tip.hidden = true; return; }
    tip.textContent = target.dataset.tip;
    tip.hidden = false;
  });
  document.addEventListener('mousemove', (e) => {
    tip.style.left = `${e.clientX + 12}px`;
    tip.style.top = `${e.clientY + 12}px`;
  });
}

document.getElementById('login-form').addEventListener('submit', login);
document.getElementById('logout').addEventListener('click', () => logout());
tooltips();
const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) start(saved); else document.getElementById('login').hidden = false;
