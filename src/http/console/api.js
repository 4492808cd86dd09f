// The daemon's API as the console uses it: requests with the tab's token, and the
// change feed read with a streaming fetch (an EventSource cannot send the token).

const TOKEN_KEY = "blocklistd-token";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(extra) {
  const h = { ...extra };
  const t = token();
  if (t) h["Authorization"] = "Bearer " + t;
  return h;
}

// Listeners of a refused token (401): the page says so instead of looking broken.
const unauthorized = new Set();
export function onUnauthorized(listener) {
  unauthorized.add(listener);
}

// One request: {status, headers, body} (body: the parsed JSON, or null when empty).
export async function call(method, path, body, query) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  let resp;
  let text;
  try {
    resp = await fetch(url, init);
    text = await resp.text();
  } catch {
    // Down or unreachable: an answer like any other, for the caller to show.
    return { status: 0, headers: new Headers(), body: { errors: ["the daemon cannot be reached"] } };
  }
  let parsed = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = { errors: [text] };
    }
  }
  if (resp.status === 401) for (const l of unauthorized) l(parsed);
  return { status: resp.status, headers: resp.headers, body: parsed };
}

// A listing read in pages of 1000 (its `continue` token in X-Blocklist-Continue), joined
// into the answer the daemon gives whole: arrays concatenated, or each array of
// `GET /blocklist`'s object. {status, headers, body} of the first page, with the joined
// body; or the first page that failed.
export async function pages(path) {
  const first = await call("GET", path, undefined, { limit: 1000 });
  if (first.status !== 200) return first;
  let body = first.body;
  let next = first.headers.get("X-Blocklist-Continue");
  while (next) {
    const page = await call("GET", path, undefined, { limit: 1000, continue: next });
    if (page.status !== 200) return page;
    if (Array.isArray(body)) body = body.concat(page.body);
    else for (const [k, v] of Object.entries(page.body)) if (Array.isArray(v)) body[k] = body[k].concat(v);
    next = page.headers.get("X-Blocklist-Continue");
  }
  return { ...first, body };
}

// Follows the feed after revision `since`: calls `onEvent({id, event, data})` for each
// event in order, `onOpen()` once the stream is answered, and resolves when the stream
// ends (a daemon stop, a lost connection, `signal` aborted, or no byte for `silenceMs`:
// heartbeats keep a healthy stream talking); rejects with {status, body} on a refusal.
export async function follow(since, signal, silenceMs, onOpen, onEvent) {
  const watchdog = new AbortController();
  const both = AbortSignal.any([signal, watchdog.signal]);
  let timer = setTimeout(() => watchdog.abort("silent"), silenceMs);
  const heard = () => {
    clearTimeout(timer);
    timer = setTimeout(() => watchdog.abort("silent"), silenceMs);
  };
  let reader = null;
  try {
    const resp = await fetch(new URL("/blocklist/events?since=" + since, location.origin), {
      headers: headers({ Accept: "text/event-stream", "Last-Event-ID": String(since) }),
      signal: both,
    });
    if (!resp.ok) {
      let body = null;
      try {
        body = await resp.json();
      } catch {
        body = null;
      }
      if (resp.status === 401) for (const l of unauthorized) l(body);
      throw { status: resp.status, body };
    }
    onOpen();
    reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let event = { id: null, event: "message", data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      heard();
      buffer += value;
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl).replace(/\r$/, "");
        buffer = buffer.slice(nl + 1);
        if (line === "") {
          if (event.data.length && event.id !== null) {
            onEvent({ id: Number(event.id), event: event.event, data: JSON.parse(event.data.join("\n")) });
          }
          event = { id: null, event: "message", data: [] };
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "id") event.id = val;
          else if (field === "event") event.event = val;
          else if (field === "data") event.data.push(val);
        }
      }
    }
  } catch (problem) {
    if (both.aborted) return; // stopped on purpose, or silent: the caller reconnects
    throw problem;
  } finally {
    clearTimeout(timer);
    if (reader) reader.cancel().catch(() => {});
  }
}

// The errors of an answer, as a list of strings.
export function errorsOf(answer) {
  const errors = answer.body && answer.body.errors;
  if (Array.isArray(errors)) return errors.map(String);
  return [`HTTP ${answer.status}`];
}
