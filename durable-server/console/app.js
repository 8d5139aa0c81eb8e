// The console's shell: logging in, the navigation, and the page each address shows.
// Addresses are fragments (`#/objects/Counter?status=active`), so every page can be
// bookmarked and the browser's back button works without the server knowing any of them.

import { ApiFailure, forgetToken, get, setToken, token } from './api.js';
import { errorNotice, fill, h } from './dom.js';
import { overview } from './overview.js';
import { fsmInstance, fsmInstances } from './fsm.js';
import { deadAlarms, object, objects, types } from './pages.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
// Stops what the page on show keeps doing (the overview's refreshing).
let leave = () => {};
// Counts the pages asked for: a page whose data arrives after a newer one was asked
// for is dropped instead of replacing the newer page.
let asked = 0;

function login(failure) {
  nav.hidden = true;
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'current-password', 'aria-describedby': 'token-hint' });
  const button = h('button', { type: 'submit' }, 'Log in');
  const problem = h('div', { id: 'login-problem' }, failure ? errorNotice(failure, 'Logging in failed') : null);
  const form = h('form', { class: 'panel login', 'aria-labelledby': 'login-title' },
    h('h1', { id: 'login-title' }, 'Log in'),
    h('div', { class: 'field' },
      h('label', { for: 'token' }, 'Bearer token'),
      input,
      h('p', { class: 'hint', id: 'token-hint' }, 'Kept in this browser tab until you log out or close it. Leave it empty for a gateway without auth.')),
    problem,
    button);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    button.disabled = true;
    setToken(input.value);
    try {
      // Any route the token must pass: the types, which every page needs anyway.
      await get('v1/types');
      nav.hidden = false;
      if (!location.hash || location.hash === '#/login') location.hash = '#/types';
      else show();
    } catch (error) {
      forgetToken();
      button.disabled = false;
      fill(problem, errorNotice(error, 'Logging in failed'));
      input.focus();
    }
  });
  fill(main, form);
  input.focus();
}

/** The page of the current address. */
async function show() {
  leave();
  leave = () => {};
  if (token() === null) {
    login();
    return;
  }
  nav.hidden = false;
  const [route, query] = location.hash.replace(/^#\/?/, '').split('?');
  const parts = route.split('/').map(decodeURIComponent);
  const params = new URLSearchParams(query ?? '');
  for (const link of nav.querySelectorAll('a')) {
    const current = link.getAttribute('href') === `#/${parts[0]}` || (parts[0].startsWith('object') && link.getAttribute('href') === '#/types');
    if (current) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  fill(main, h('p', { class: 'loading' }, 'Loading…'));
  const turn = ++asked;
  // Pages that load data are built off-screen and shown only if still the latest.
  const view = document.createElement('div');
  const current = () => turn === asked;
  try {
    switch (parts[0]) {
      case 'overview':
        leave = overview(main);
        break;
      case 'objects':
        await objects(view, parts[1], params);
        break;
      case 'object':
        await object(view, parts[1], parts.slice(2).join('/'), params);
        break;
      case 'dead':
        await deadAlarms(view, params);
        break;
      case 'fsm':
        if (parts[1]) await fsmInstance(view, parts[1]);
        else await fsmInstances(view, params);
        break;
      case 'types':
      case '':
        await types(view);
        break;
      default:
        fill(view, h('h1', {}, 'No such page'), h('p', {}, h('a', { href: '#/types' }, 'Back to the types')));
    }
    if (!current()) return;
    if (parts[0] !== 'overview') main.replaceChildren(...view.childNodes);
  } catch (failure) {
    if (!current()) return;
    if (failure instanceof ApiFailure && failure.status === 401) {
      forgetToken();
      login(failure);
      return;
    }
    fill(main, h('h1', {}, 'This page could not be shown'), errorNotice(failure));
  }
  document.title = `${main.querySelector('h1')?.textContent ?? 'Console'} · Durable objects console`;
}

document.getElementById('logout').addEventListener('click', () => {
  forgetToken();
  location.hash = '#/login';
  show();
});
window.addEventListener('hashchange', () => {
  show().then(() => main.focus({ preventScroll: true }));
});
show();
