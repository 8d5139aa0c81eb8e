// The console's pages over the gateway's routes: the exposed types, the objects of a type,
// one object (its state, alarms, a call form, delete), and the dead alarms.

import { ApiFailure, del, get, path, post } from './api.js';
import { announce, errorNotice, fill, h, okNotice, pretty, statusBadge, when } from './dom.js';

const STATUSES = ['active', 'hibernated', 'stored'];
const PAGE_SIZES = [10, 25, 100];

// A notice to show on the next page (after a delete, which leaves the object's page).
let flash = null;

function takeFlash() {
  const notice = flash;
  flash = null;
  return notice;
}

async function typeList() {
  return (await get('v1/types')).types;
}

/** The page of the exposed types: handlers, alarms, options and state fields. */
export async function types(main) {
  const list = await typeList();
  fill(main,
    h('h1', {}, 'Types'),
    list.length === 0 ? h('p', {}, 'This gateway exposes no type.') : null,
    ...list.map(typeSection),
  );
}

function typeSection(type) {
  const options = type.options;
  const duration = (value) => value ?? 'never';
  return h('section', { class: 'panel', 'aria-labelledby': `type-${type.name}` },
    h('h2', { id: `type-${type.name}` }, type.name),
    h('p', {}, h('a', { href: `#/objects/${encodeURIComponent(type.name)}` }, `Objects of ${type.name}`)),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Hibernates after'), h('dd', {}, duration(options.hibernate_after)),
      h('dt', {}, 'Leaves memory after'), h('dd', {}, duration(options.shutdown_after)),
      h('dt', {}, 'Call timeout'), h('dd', {}, options.call_timeout ?? 'none'),
      h('dt', {}, 'Queue capacity'), h('dd', {}, options.queue_capacity ?? 'unbounded')),
    h('table', {},
      h('caption', {}, 'Handlers'),
      h('thead', {}, h('tr', {}, ['Handler', 'Access', 'Arguments', 'Output', 'Error'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, type.handlers.map((handler) => h('tr', {},
        h('td', {}, h('code', {}, handler.name), handler.doc ? h('p', { class: 'hint' }, handler.doc) : null),
        h('td', {}, handler.access),
        h('td', {}, handler.arguments.length === 0 ? 'none' : h('code', {}, signature(handler))),
        h('td', {}, h('code', {}, handler.output ?? '?')),
        h('td', {}, handler.error ? h('code', {}, handler.error) : 'none'))))),
    h('h3', {}, 'Alarms'),
    type.alarms.length === 0 ? h('p', {}, 'None.') : h('ul', {}, type.alarms.map((name) => h('li', {}, h('code', {}, name)))),
    type.fields.length === 0 ? null : h('table', {},
      h('caption', {}, 'State fields'),
      h('thead', {}, h('tr', {}, ['Field', 'Type', 'Default'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, type.fields.map((field) => h('tr', {},
        h('td', {}, h('code', {}, field.name)),
        h('td', {}, h('code', {}, field.type)),
        h('td', {}, h('code', {}, field.default === undefined ? '' : JSON.stringify(field.default))))))));
}

function signature(handler) {
  return handler.arguments
    .map((name, i) => (handler.argument_types[i] ? `${name}: ${handler.argument_types[i]}` : name))
    .join(', ');
}

/** The objects of `typeName`, a page at a time, by status. */
export async function objects(main, typeName, params) {
  const status = STATUSES.includes(params.get('status')) ? params.get('status') : '';
  const limit = PAGE_SIZES.includes(Number(params.get('limit'))) ? Number(params.get('limit')) : PAGE_SIZES[0];
  const cursor = params.get('cursor');
  const query = new URLSearchParams({ type: typeName, limit: String(limit) });
  if (status) query.set('status', status);
  if (cursor) query.set('cursor', cursor);
  const page = await get(`v1/objects?${query}`);

  const address = (changes) => {
    const next = new URLSearchParams({ limit: String(limit) });
    if (status) next.set('status', status);
    for (const [key, value] of Object.entries(changes)) {
      if (value) next.set(key, value);
      else next.delete(key);
    }
    return `#/objects/${encodeURIComponent(typeName)}?${next}`;
  };
  const statusSelect = h('select', { id: 'status-filter', name: 'status' },
    h('option', { value: '' }, 'every stored object'),
    STATUSES.map((s) => h('option', { value: s, selected: s === status }, s)));
  const sizeSelect = h('select', { id: 'page-size', name: 'limit' },
    PAGE_SIZES.map((n) => h('option', { value: String(n), selected: n === limit }, String(n))));
  const filter = h('form', { class: 'panel row', 'aria-label': 'Filter' },
    h('div', { class: 'field' }, h('label', { for: 'status-filter' }, 'Status'), statusSelect),
    h('div', { class: 'field' }, h('label', { for: 'page-size' }, 'Per page'), sizeSelect),
    h('button', { type: 'submit' }, 'Show'));
  filter.addEventListener('submit', (event) => {
    event.preventDefault();
    const next = new URLSearchParams({ limit: sizeSelect.value });
    if (statusSelect.value) next.set('status', statusSelect.value);
    location.hash = `#/objects/${encodeURIComponent(typeName)}?${next}`;
  });
  const idInput = h('input', { id: 'open-id', name: 'id', required: true, autocomplete: 'off' });
  const open = h('form', { class: 'panel row', 'aria-label': 'Open an object' },
    h('div', { class: 'field' }, h('label', { for: 'open-id' }, 'Object id'), idInput),
    h('button', { type: 'submit', class: 'secondary' }, 'Open'));
  open.addEventListener('submit', (event) => {
    event.preventDefault();
    location.hash = `#/object/${encodeURIComponent(typeName)}/${encodeURIComponent(idInput.value)}`;
  });

  fill(main,
    h('h1', {}, `Objects of ${typeName}`),
    takeFlash(),
    filter,
    open,
    page.objects.length === 0
      ? h('p', {}, cursor ? 'No more objects.' : 'No object in this status.')
      : h('table', { id: 'objects' },
        h('caption', {}, status ? `${status} objects` : 'Stored objects', cursor ? `, after ${cursor}` : ''),
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Id'), h('th', { scope: 'col' }, 'Status'))),
        h('tbody', {}, page.objects.map((entry) => h('tr', {},
          h('td', {}, h('a', { href: `#/object/${encodeURIComponent(typeName)}/${encodeURIComponent(entry.id)}` }, entry.id)),
          h('td', {}, statusBadge(entry.status)))))),
    h('nav', { class: 'pager', 'aria-label': 'Pages' },
      cursor ? h('a', { href: address({ cursor: null }) }, 'First page') : null,
      page.next_cursor ? h('a', { href: address({ cursor: page.next_cursor }), rel: 'next' }, 'Next page') : h('span', {}, 'Last page')),
  );
}

/** One object: status, state, version, alarms; a call form and delete. */
export async function object(main, typeName, id) {
  const route = `v1/objects/${path(typeName, id)}`;
  const [view, list] = await Promise.all([
    get(route).catch((failure) => failure),
    typeList(),
  ]);
  const type = list.find((t) => t.name === typeName);
  const back = h('p', {}, h('a', { href: `#/objects/${encodeURIComponent(typeName)}` }, `All objects of ${typeName}`));
  const details = h('div', { id: 'object-details' });
  const absent = view instanceof ApiFailure && view.code === 'object_not_found';
  if (view instanceof ApiFailure && !absent) throw view;
  showDetails(details, absent ? null : view, absent ? view : null);

  const refresh = async () => {
    try {
      showDetails(details, await get(route), null);
    } catch (failure) {
      showDetails(details, null, failure);
    }
  };
  fill(main,
    h('h1', {}, `${typeName} `, h('span', { class: 'mono' }, id)),
    back,
    details,
    type ? callForm(type, route, refresh) : null,
    deleteSection(typeName, id, route),
  );
}

function showDetails(details, view, failure) {
  if (failure) {
    fill(details, failure.code === 'object_not_found'
      ? h('div', { class: 'notice', role: 'status' }, h('p', {}, `This object is not stored and not live (${failure.describe()}). A call creates it.`))
      : errorNotice(failure, 'Reading the object failed'));
    return;
  }
  const now = Date.now();
  fill(details,
    h('dl', { class: 'facts' },
      h('dt', {}, 'Status'), h('dd', { id: 'object-status' }, statusBadge(view.status)),
      h('dt', {}, 'Version'), h('dd', { id: 'object-version' }, view.version === null ? 'nothing stored yet' : String(view.version))),
    h('h2', {}, 'State'),
    h('pre', { class: 'json', id: 'object-state', tabindex: '0', 'aria-label': 'State as JSON' }, pretty(view.state)),
    h('h2', {}, 'Alarms'),
    view.alarms.length === 0 ? h('p', {}, 'No alarm.') : h('table', { id: 'object-alarms' },
      h('thead', {}, h('tr', {}, ['Alarm', 'Due', 'Failed attempts', 'Dead', 'Last error'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, view.alarms.map((alarm) => h('tr', {},
        h('td', {}, h('code', {}, alarm.name)),
        h('td', {}, when(alarm.fire_at, now)),
        h('td', { class: 'num' }, String(alarm.attempts)),
        h('td', {}, alarm.dead ? 'dead' : 'no'),
        h('td', {}, alarm.last_error ?? ''))))),
  );
}

function callForm(type, route, refresh) {
  if (type.handlers.length === 0) return null;
  const select = h('select', { id: 'call-handler', name: 'handler' },
    type.handlers.map((handler) => h('option', { value: handler.name }, `${handler.name} (${handler.access})`)));
  const args = h('textarea', { id: 'call-args', name: 'arguments', spellcheck: 'false', 'aria-describedby': 'call-signature' });
  const hint = h('p', { class: 'hint', id: 'call-signature' });
  const outcome = h('div', { id: 'call-outcome', 'aria-live': 'polite' });
  const button = h('button', { type: 'submit' }, 'Call');
  const chosen = () => type.handlers.find((handler) => handler.name === select.value);
  const describe = () => {
    const handler = chosen();
    const output = handler.error ? `Result<${handler.output}, ${handler.error}>` : handler.output;
    hint.textContent = `Arguments: ${handler.arguments.length ? signature(handler) : 'none'}. Returns ${output ?? '?'}.`;
    args.value = pretty(Object.fromEntries(handler.arguments.map((name) => [name, null])));
  };
  select.addEventListener('change', describe);
  describe();
  const form = h('form', { class: 'panel', id: 'call-form', 'aria-labelledby': 'call-title' },
    h('h2', { id: 'call-title' }, 'Call a handler'),
    h('div', { class: 'field' }, h('label', { for: 'call-handler' }, 'Handler'), select),
    h('div', { class: 'field' }, h('label', { for: 'call-args' }, 'Arguments (a JSON object)'), args, hint),
    button,
    outcome);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const handler = chosen();
    button.disabled = true;
    try {
      const reply = await post(`${route}/call/${encodeURIComponent(handler.name)}`, { raw: args.value });
      fill(outcome, okNotice(h('strong', {}, `${handler.name} returned`)),
        h('pre', { class: 'json', id: 'call-result', 'aria-label': 'Result as JSON' }, pretty(reply.result)));
      announce(`${handler.name} returned`);
    } catch (failure) {
      fill(outcome, errorNotice(failure, `${handler.name} failed`));
    } finally {
      button.disabled = false;
    }
    await refresh();
  });
  return form;
}

function deleteSection(typeName, id, route) {
  const outcome = h('div', { id: 'delete-outcome' });
  const confirm = h('button', { type: 'button', class: 'danger', id: 'confirm-delete' }, 'Delete');
  const cancel = h('button', { type: 'button', class: 'secondary', autofocus: true }, 'Keep it');
  const dialog = h('dialog', { id: 'delete-dialog', 'aria-labelledby': 'delete-question' },
    h('p', { id: 'delete-question' }, `Delete ${typeName} ${id}? Its state and alarms are removed for good.`),
    h('div', { class: 'actions' }, cancel, confirm));
  cancel.addEventListener('click', () => dialog.close());
  confirm.addEventListener('click', async () => {
    confirm.disabled = true;
    try {
      const reply = await del(route);
      dialog.close();
      flash = okNotice(`Deleted ${typeName} ${id}`, reply.deleted ? '.' : ' (nothing was stored).');
      location.hash = `#/objects/${encodeURIComponent(typeName)}`;
    } catch (failure) {
      dialog.close();
      fill(outcome, errorNotice(failure, 'Deleting failed'));
    } finally {
      confirm.disabled = false;
    }
  });
  return h('section', { class: 'panel', 'aria-labelledby': 'delete-title' },
    h('h2', { id: 'delete-title' }, 'Delete'),
    h('p', {}, 'Removes the state and alarms, after the calls already queued.'),
    h('button', { type: 'button', class: 'danger', id: 'delete', onclick: () => dialog.showModal() }, 'Delete this object…'),
    outcome,
    dialog);
}

/** The dead alarms of every type (or one), with their last error and a re-queue button. */
export async function deadAlarms(main, params) {
  const typeName = params.get('type');
  const cursor = params.get('cursor');
  const query = new URLSearchParams({ limit: '100' });
  if (typeName) query.set('type', typeName);
  if (cursor) query.set('cursor', cursor);
  const page = await get(`v1/alarms/dead?${query}`);
  const outcome = h('div', { id: 'requeue-outcome' });
  const rows = page.alarms.map((alarm) => {
    const button = h('button', { type: 'button', 'aria-label': `Re-queue ${alarm.name} of ${alarm.type} ${alarm.id}` }, 'Re-queue');
    const row = h('tr', {},
      h('td', {}, alarm.type),
      h('td', {}, h('a', { href: `#/object/${encodeURIComponent(alarm.type)}/${encodeURIComponent(alarm.id)}` }, alarm.id)),
      h('td', {}, h('code', {}, alarm.name)),
      h('td', {}, when(alarm.fire_at)),
      h('td', { class: 'num' }, String(alarm.attempts)),
      h('td', {}, alarm.last_error ?? 'not recorded'),
      h('td', {}, button));
    button.addEventListener('click', async () => {
      button.disabled = true;
      try {
        const reply = await post('v1/alarms/dead/requeue', { json: { type: alarm.type, id: alarm.id, name: alarm.name } });
        fill(outcome, reply.requeued
          ? okNotice(`Re-queued ${alarm.name} of ${alarm.type} ${alarm.id}: it fires again now.`)
          : h('div', { class: 'notice', role: 'status' }, h('p', {}, `${alarm.name} of ${alarm.type} ${alarm.id} is no longer dead; nothing to re-queue.`)));
        row.remove();
      } catch (failure) {
        button.disabled = false;
        fill(outcome, errorNotice(failure, 'Re-queueing failed'));
      }
    });
    return row;
  });
  fill(main,
    h('h1', {}, typeName ? `Dead alarms of ${typeName}` : 'Dead alarms'),
    h('p', { class: 'lead' }, 'Alarms that used up their attempts. Fix the cause, then re-queue them: each fires again now, its attempts counted afresh.'),
    outcome,
    rows.length === 0 ? h('p', {}, 'No dead alarm.') : h('table', { id: 'dead-alarms' },
      h('thead', {}, h('tr', {}, ['Type', 'Object', 'Alarm', 'Was due', 'Attempts', 'Last error', 'Action'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows)),
    page.next_cursor ? h('p', {}, h('a', { href: `#/dead?${new URLSearchParams({ ...(typeName ? { type: typeName } : {}), cursor: page.next_cursor })}` }, 'Next page')) : null,
  );
}
