// Small SVG charts for the history section: built with the DOM, no library.
const NS = 'http://www.w3.org/2000/svg';

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined) node.setAttribute(k, String(v));
  for (const c of children.flat()) if (c) node.append(c);
  return node;
}

// Steps through `points` ([t, value]) scaled into the box.
function stepPath(points, x, y) {
  if (!points.length) return '';
  let d = `M${x(points[0][0]).toFixed(1)},${y(points[0][1]).toFixed(1)}`;
  for (let i = 1; i < points.length; i += 1) {
    d += `H${x(points[i][0]).toFixed(1)}V${y(points[i][1]).toFixed(1)}`;
  }
  return d;
}

// One small chart: `series` [{points, colour, dashed, label}] over [t0, t1] and [0, yMax].
// `marks` are horizontal reference lines ({value, label}).
export function stepChart(series, { t0, t1, yMax, width = 260, height = 90, title, format, marks = [] }) {
  const pad = { l: 34, r: 6, t: 16, b: 14 };
  const x = (t) => pad.l + ((t - t0) / Math.max(1, t1 - t0)) * (width - pad.l - pad.r);
  const y = (v) => height - pad.b - (Math.min(v, yMax) / (yMax || 1)) * (height - pad.t - pad.b);
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, class: 'chart', role: 'img' });
  if (title) root.append(svg('text', { x: pad.l, y: 11, class: 'chart-title' }, document.createTextNode(title)));
  for (const v of [0, yMax]) {
    root.append(svg('line', { x1: pad.l, x2: width - pad.r, y1: y(v), y2: y(v), class: 'grid' }));
    root.append(svg('text', { x: pad.l - 3, y: y(v) + 3, class: 'axis', 'text-anchor': 'end' },
      document.createTextNode(format ? format(v) : String(v))));
  }
  for (const m of marks) {
    root.append(svg('line', { x1: pad.l, x2: width - pad.r, y1: y(m.value), y2: y(m.value), class: 'mark' }));
  }
  for (const s of series) {
    if (!s.points.length) continue;
    root.append(svg('path', {
      d: stepPath(s.points, x, y), fill: 'none', stroke: s.colour, 'stroke-width': s.dashed ? 1.5 : 2,
      'stroke-dasharray': s.dashed ? '4 3' : undefined, 'data-series': s.label,
    }));
  }
  return root;
}

// Bars for a histogram: `counts` per bucket, labelled by `labels`.
export function barChart(counts, labels, { width = 320, height = 110, title, colour = '#4e79a7' } = {}) {
  const pad = { l: 26, r: 6, t: 16, b: 18 };
  const max = Math.max(1, ...counts);
  const w = (width - pad.l - pad.r) / counts.length;
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, class: 'chart', role: 'img' });
  if (title) root.append(svg('text', { x: pad.l, y: 11, class: 'chart-title' }, document.createTextNode(title)));
  root.append(svg('text', { x: pad.l - 3, y: pad.t + 6, class: 'axis', 'text-anchor': 'end' },
    document.createTextNode(String(max))));
  counts.forEach((c, i) => {
    const h = (c / max) * (height - pad.t - pad.b);
    const bar = svg('rect', { x: pad.l + i * w + 1, y: height - pad.b - h, width: Math.max(1, w - 2), height: h,
      fill: colour, 'data-bucket': labels[i], 'data-count': c });
    bar.append(svg('title', {}, document.createTextNode(`${labels[i]}: ${c} pod(s)`)));
    root.append(bar);
    root.append(svg('text', { x: pad.l + i * w + w / 2, y: height - 5, class: 'axis', 'text-anchor': 'middle' },
      document.createTextNode(labels[i])));
  });
  return root;
}
