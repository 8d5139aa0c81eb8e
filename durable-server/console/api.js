// The gateway's HTTP API as the console uses it: the token kept for the browser session, sent
// as the bearer header, and every failure turned into an ApiFailure with its status and code.

const TOKEN_KEY = 'durable-console-token';

// The gateway's root: the console is served at `<root>/console/`.
const root = new URL('../', document.baseURI);

/** The token entered for this browser session, or null before logging in. */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** Keeps `value` (possibly empty, for a gateway without auth) for this browser session. */
export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** A refused or failed request: the gateway's error body, or what stood in its place. */
export class ApiFailure extends Error {
  constructor(status, code, message, details = null, retryable = false) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
    this.retryable = retryable;
  }

  /** The failure in words, with its code: `Not allowed (HTTP 403, code forbidden)`. */
  describe() {
    const where = this.status ? `HTTP ${this.status}, code ${this.code}` : `code ${this.code}`;
    return `${this.message} (${where})`;
  }
}

/** `a/b` with each segment percent-encoded, for object types, ids and names in a path. */
export function path(...segments) {
  return segments.map(encodeURIComponent).join('/');
}

/**
 * Sends `method` to `route` (relative to the gateway's root, such as `v1/types`) and returns
 * the reply: parsed JSON, or text for `text: true`. `json` is a value to send as JSON, `raw`
 * a body sent as typed.
 */
export async function request(method, route, { json, raw, text = false } = {}) {
  const headers = { Accept: text ? 'text/plain' : 'application/json' };
  const held = token();
  if (held) headers.Authorization = `Bearer ${held}`;
  let body;
  if (json !== undefined) body = JSON.stringify(json);
  if (raw !== undefined) body = raw;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(new URL(route, root), { method, headers, body, cache: 'no-store' });
  } catch (error) {
    throw new ApiFailure(0, 'unreachable', `The gateway did not answer: ${error.message}`);
  }
  const reply = await response.text();
  if (!response.ok) throw failure(response, reply);
  if (text) return reply;
  try {
    return JSON.parse(reply);
  } catch {
    throw new ApiFailure(response.status, 'invalid_reply', 'The gateway answered something that is not JSON');
  }
}

function failure(response, reply) {
  let error = null;
  try {
    error = JSON.parse(reply).error;
  } catch {
    // Not the gateway's error body (a proxy's page, say): its status speaks for it.
  }
  if (error && typeof error.code === 'string') {
    return new ApiFailure(response.status, error.code, error.message, error.details ?? null, error.retryable);
  }
  const words = response.statusText || 'The request failed';
  return new ApiFailure(response.status, `http_${response.status}`, words);
}

export const get = (route, options) => request('GET', route, options);
export const post = (route, options) => request('POST', route, options);
export const del = (route) => request('DELETE', route);
