// A line chart drawn as SVG: a few series over time, on a fixed-size drawing that scales with
// its box (so nothing moves when values come in). Series differ by dash pattern as well as
// colour, and the legend names each with its latest value.

const NS = 'http://www.w3.org/2000/svg';
const WIDTH = 600;
const HEIGHT = 200;
const PAD = { left: 96, right: 8, top: 12, bottom: 30 };

function svg(tag, attrs = {}) {
  const element = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attrs)) element.setAttribute(name, String(value));
  return element;
}

/**
 * A chart titled `title` of `series` (names), values formatted by `format`. Returns the
 * `<figure>` and `update(times, columns)`, which redraws it: `times` in ms, one array of
 * values (null for a gap) per series.
 */
export function lineChart(title, series, format) {
  const figure = document.createElement('figure');
  figure.className = 'chart';
  const caption = document.createElement('figcaption');
  caption.textContent = title;
  const drawing = svg('svg', { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img' });
  drawing.setAttribute('aria-label', title);
  const legend = document.createElement('ul');
  legend.className = 'legend';
  const latest = series.map((name, i) => {
    const item = document.createElement('li');
    const key = svg('svg', { viewBox: '0 0 32 12', 'aria-hidden': 'true' });
    key.append(svg('line', { x1: 0, y1: 6, x2: 32, y2: 6, class: `series s${i}` }));
    const value = document.createElement('span');
    value.textContent = `${name}: no data yet`;
    item.append(key, value);
    legend.append(item);
    return { name, value };
  });
  figure.append(caption, drawing, legend);

  function update(times, columns) {
    drawing.replaceChildren();
    const values = columns.flat().filter((v) => v !== null && Number.isFinite(v));
    const top = niceCeiling(Math.max(0, ...values));
    const first = times[0] ?? 0;
    const span = Math.max(1, (times[times.length - 1] ?? 0) - first);
    const x = (t) => PAD.left + ((t - first) / span) * (WIDTH - PAD.left - PAD.right);
    const y = (v) => HEIGHT - PAD.bottom - (v / top) * (HEIGHT - PAD.top - PAD.bottom);
    for (const level of [0, top / 2, top]) {
      drawing.append(svg('line', { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(level), y2: y(level), class: 'axis' }));
      const label = svg('text', { x: PAD.left - 8, y: y(level) + 6, 'text-anchor': 'end', class: 'tick' });
      label.textContent = format(level);
      drawing.append(label);
    }
    const seconds = svg('text', { x: WIDTH - PAD.right, y: HEIGHT - 6, 'text-anchor': 'end', class: 'tick' });
    seconds.textContent = `last ${Math.round(span / 1000)} s`;
    drawing.append(seconds);
    columns.forEach((column, i) => {
      let d = '';
      let pen = 'M';
      column.forEach((v, j) => {
        if (v === null || !Number.isFinite(v)) {
          pen = 'M';
          return;
        }
        d += `${pen}${x(times[j]).toFixed(1)},${y(v).toFixed(1)} `;
        pen = 'L';
      });
      if (d) drawing.append(svg('path', { d, class: `series s${i}` }));
      const last = [...column].reverse().find((v) => v !== null && Number.isFinite(v));
      latest[i].value.textContent = `${latest[i].name}: ${last === undefined ? 'no data yet' : format(last)}`;
    });
  }

  return { figure, update };
}

/** A round number at least `v`, for the top of the scale. */
function niceCeiling(v) {
  if (!(v > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) {
    if (m * step >= v) return m * step;
  }
  return 10 * step;
}
