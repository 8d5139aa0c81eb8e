// Building the page: elements from a tag, attributes and children (text is always set as
// text, never parsed as HTML), and the shared pieces every page shows.

/**
 * `<tag>` with `attrs` (`class`, `for`, `on<event>` handlers, booleans) and `children`
 * (elements, strings or nested arrays; null and false are skipped).
 */
export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (value === true) {
      element.setAttribute(name, '');
    } else {
      element.setAttribute(name, String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else element.append(child instanceof Node ? child : String(child));
  }
}

/** Replaces what `parent` shows with `children` (null and false skipped, as in `h`). */
export function fill(parent, ...children) {
  parent.replaceChildren();
  append(parent, children);
}

/** A notice of `failure` (an ApiFailure or any error) in words, with its code. */
export function errorNotice(failure, what) {
  const words = typeof failure.describe === 'function' ? failure.describe() : failure.message;
  return h('div', { class: 'notice error', role: 'alert' },
    h('p', {}, h('strong', {}, 'Error: '), what ? `${what}: ` : '', words),
    failure.details != null ? h('pre', { class: 'json', 'aria-label': 'Error details' }, pretty(failure.details)) : null);
}

/** A notice that something went well. */
export function okNotice(...words) {
  return h('div', { class: 'notice ok', role: 'status' }, h('p', {}, ...words));
}

/** JSON indented for reading. */
export function pretty(value) {
  return JSON.stringify(value, null, 2);
}

/** An object's status in words (its colour only repeats them). */
export function statusBadge(status) {
  return h('span', { class: `status status-${status}` }, status);
}

/** A time from the API (RFC 3339, UTC) as a `<time>`: UTC text, and how far from now. */
export function when(rfc3339, now = Date.now()) {
  const at = Date.parse(rfc3339);
  if (Number.isNaN(at)) return rfc3339;
  return h('time', { datetime: rfc3339 }, `${rfc3339.replace('T', ' ')} (${relative(at - now)})`);
}

function relative(ms) {
  const ahead = ms >= 0;
  let s = Math.round(Math.abs(ms) / 1000);
  let text;
  if (s < 60) text = `${s} s`;
  else if (s < 3600) text = `${Math.round(s / 60)} min`;
  else if (s < 86400) text = `${(s / 3600).toFixed(1)} h`;
  else text = `${(s / 86400).toFixed(1)} days`;
  return ahead ? `in ${text}` : `${text} ago`;
}

/** Announces `words` to screen readers. */
export function announce(words) {
  document.getElementById('status').textContent = words;
}
