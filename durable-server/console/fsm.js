// The state machine pages: instances by status and FSM, a page at a time, and one instance
// (status, step, state, result or error, inbox). They read the gateway's /v1/fsm routes.

import { get } from './api.js';
import { fill, h, pretty, statusBadge, when } from './dom.js';

const STATUSES = ['runnable', 'executing', 'awaiting_signal', 'awaiting_children', 'done', 'failed'];
const PAGE_SIZES = [10, 25, 100];

/** The instances, filtered by status and FSM name, by id. */
export async function fsmInstances(main, params) {
  const status = STATUSES.includes(params.get('status')) ? params.get('status') : '';
  const name = params.get('name') ?? '';
  const limit = PAGE_SIZES.includes(Number(params.get('limit'))) ? Number(params.get('limit')) : PAGE_SIZES[0];
  const after = params.get('after');
  const query = new URLSearchParams({ limit: String(limit) });
  if (status) query.set('status', status);
  if (name) query.set('name', name);
  if (after) query.set('after', after);
  const page = await get(`v1/fsm?${query}`);

  const address = (changes) => {
    const next = new URLSearchParams({ limit: String(limit) });
    if (status) next.set('status', status);
    if (name) next.set('name', name);
    for (const [key, value] of Object.entries(changes)) {
      if (value) next.set(key, value);
      else next.delete(key);
    }
    return `#/fsm?${next}`;
  };
  const statusSelect = h('select', { id: 'fsm-status-filter', name: 'status' },
    h('option', { value: '' }, 'any status'),
    STATUSES.map((s) => h('option', { value: s, selected: s === status }, s)));
  const nameInput = h('input', { id: 'fsm-name-filter', name: 'name', value: name, autocomplete: 'off' });
  const sizeSelect = h('select', { id: 'fsm-page-size', name: 'limit' },
    PAGE_SIZES.map((n) => h('option', { value: String(n), selected: n === limit }, String(n))));
  const filter = h('form', { class: 'panel row', 'aria-label': 'Filter' },
    h('div', { class: 'field' }, h('label', { for: 'fsm-status-filter' }, 'Status'), statusSelect),
    h('div', { class: 'field' }, h('label', { for: 'fsm-name-filter' }, 'State machine'), nameInput),
    h('div', { class: 'field' }, h('label', { for: 'fsm-page-size' }, 'Per page'), sizeSelect),
    h('button', { type: 'submit' }, 'Show'));
  filter.addEventListener('submit', (event) => {
    event.preventDefault();
    const next = new URLSearchParams({ limit: sizeSelect.value });
    if (statusSelect.value) next.set('status', statusSelect.value);
    if (nameInput.value.trim()) next.set('name', nameInput.value.trim());
    location.hash = `#/fsm?${next}`;
  });
  const idInput = h('input', { id: 'open-instance', name: 'id', required: true, inputmode: 'numeric', pattern: '[0-9]+', autocomplete: 'off' });
  const open = h('form', { class: 'panel row', 'aria-label': 'Open an instance' },
    h('div', { class: 'field' }, h('label', { for: 'open-instance' }, 'Instance id'), idInput),
    h('button', { type: 'submit', class: 'secondary' }, 'Open'));
  open.addEventListener('submit', (event) => {
    event.preventDefault();
    location.hash = `#/fsm/${encodeURIComponent(idInput.value)}`;
  });

  fill(main,
    h('h1', {}, 'State machines'),
    filter,
    open,
    page.instances.length === 0
      ? h('p', {}, after ? 'No more instances.' : 'No instance matches.')
      : h('table', { id: 'fsm-instances' },
        h('caption', {}, status ? `${status} instances` : 'Instances', name ? ` of ${name}` : '', after ? `, after ${after}` : ''),
        h('thead', {}, h('tr', {}, ['Id', 'State machine', 'Status', 'Step', 'Key', 'Updated'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, page.instances.map((instance) => h('tr', {},
          h('td', {}, h('a', { href: `#/fsm/${instance.id}` }, String(instance.id))),
          h('td', {}, instance.fsm),
          h('td', {}, statusBadge(instance.status)),
          h('td', {}, h('code', {}, instance.step)),
          h('td', {}, instance.correlation_key ?? ''),
          h('td', {}, when(instance.updated_at)))))),
    h('nav', { class: 'pager', 'aria-label': 'Pages' },
      after ? h('a', { href: address({ after: null }) }, 'First page') : null,
      page.next_after !== null ? h('a', { href: address({ after: String(page.next_after) }), rel: 'next' }, 'Next page') : h('span', {}, 'Last page')),
  );
}

/** One instance: where it stands, its state, its result or error, its inbox. */
export async function fsmInstance(main, id) {
  const instance = await get(`v1/fsm/${encodeURIComponent(id)}`);
  const inbox = instance.inbox ?? [];
  fill(main,
    h('h1', {}, `Instance ${instance.id} of ${instance.fsm}`),
    h('p', {}, h('a', { href: `#/fsm?${new URLSearchParams({ name: instance.fsm })}` }, `All instances of ${instance.fsm}`)),
    h('section', { class: 'panel', 'aria-labelledby': 'instance-facts' },
      h('h2', { id: 'instance-facts' }, 'Where it stands'),
      h('dl', { class: 'facts', id: 'instance' },
        h('dt', {}, 'Status'), h('dd', {}, statusBadge(instance.status)),
        h('dt', {}, 'Step'), h('dd', {}, h('code', {}, instance.step)),
        h('dt', {}, 'Version'), h('dd', {}, String(instance.fsm_version)),
        h('dt', {}, 'Attempts of this step'), h('dd', {}, String(instance.attempt)),
        h('dt', {}, 'Queue'), h('dd', {}, `${instance.queue} (priority ${instance.priority})`),
        h('dt', {}, 'Correlation key'), h('dd', {}, instance.correlation_key ?? 'none'),
        instance.awaits ? [h('dt', {}, 'Awaits'), h('dd', {}, instance.awaits.join(', '))] : null,
        instance.await_deadline ? [h('dt', {}, 'Await times out'), h('dd', {}, when(instance.await_deadline))] : null,
        instance.parent_id !== null ? [h('dt', {}, 'Parent'), h('dd', {}, h('a', { href: `#/fsm/${instance.parent_id}` }, String(instance.parent_id)))] : null,
        h('dt', {}, 'Runs next'), h('dd', {}, when(instance.eligible_at)),
        h('dt', {}, 'Inserted'), h('dd', {}, when(instance.inserted_at)),
        h('dt', {}, 'Last changed'), h('dd', {}, when(instance.updated_at)))),
    instance.error !== null ? h('div', { class: 'notice error', role: 'status', id: 'instance-error' },
      h('p', {}, h('strong', {}, instance.status === 'failed' ? 'Failed: ' : 'Last error: '), instance.error)) : null,
    instance.result !== null ? h('section', { class: 'panel', 'aria-labelledby': 'instance-result' },
      h('h2', { id: 'instance-result' }, 'Result'),
      h('pre', { class: 'json', id: 'result-json' }, pretty(instance.result))) : null,
    h('section', { class: 'panel', 'aria-labelledby': 'instance-state' },
      h('h2', { id: 'instance-state' }, 'State'),
      h('pre', { class: 'json', id: 'state-json' }, pretty(instance.state))),
    h('section', { class: 'panel', 'aria-labelledby': 'instance-inbox' },
      h('h2', { id: 'instance-inbox' }, 'Inbox'),
      inbox.length === 0 ? h('p', {}, 'No signal waiting.') : h('table', { id: 'inbox' },
        h('thead', {}, h('tr', {}, ['Signal', 'Name', 'Payload', 'Delivered'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, inbox.map((signal) => h('tr', {},
          h('td', {}, String(signal.id)),
          h('td', {}, h('code', {}, signal.name)),
          h('td', {}, h('code', {}, JSON.stringify(signal.payload))),
          h('td', {}, when(signal.inserted_at))))))),
  );
}
