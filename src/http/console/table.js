// The live table: every item by "kind/id", shown through the filters and the sort, and only
// the rows in view are in the document (100,000 items stay usable). Changes mark the view
// stale; it is rebuilt at most once a frame (and at most every 250 ms when large), never
// per event.

const ROW_HEIGHT = 30;
const PERMANENT = 9223372036854775807;

export const items = new Map();

// Which task managers run on which node (`GET /taskmanagers`, then the feed's
// registrations): a node row's task managers come from here, not from item events, which
// do not carry them.
const nodeOf = new Map();
const onNode = new Map();

export function registrations(list) {
  nodeOf.clear();
  onNode.clear();
  for (const { id, node } of list) registered(id, node);
}

export function registered(tm, node) {
  unregistered(tm);
  nodeOf.set(tm, node);
  if (!onNode.has(node)) onNode.set(node, new Set());
  onNode.get(node).add(tm);
  if (items.has(key("node", node))) changed();
}

export function unregistered(tm) {
  const node = nodeOf.get(tm);
  if (node === undefined) return;
  nodeOf.delete(tm);
  const tms = onNode.get(node);
  tms.delete(tm);
  if (!tms.size) onNode.delete(node);
  if (items.has(key("node", node))) changed();
}

// What enforcers (blocklist-kube, say) report they did about each item (`GET
// /enforcement`): a status emits no event, so the console reads them again after changes
// and every few seconds.
const enforcement = new Map();

export function statuses(list) {
  enforcement.clear();
  for (const { kind, id, enforcer, state, detail } of list) {
    const k = key(kind, id);
    if (!enforcement.has(k)) enforcement.set(k, []);
    enforcement.get(k).push({ enforcer, state, detail });
  }
  changed();
}

// Each enforcer's state as a badge of its own, the word alone (the enforcer's name is in
// its label and tooltip): "held back" and "failed" stand out, so a node the cluster does
// not obey never looks like one it does.
const STATES = {
  enforced: "enforced",
  dryRun: "dry run",
  noTarget: "no target",
  heldBack: "held back",
  failed: "failed",
};

function enforcementCell(item) {
  const span = cell("", "enforcement");
  for (const { enforcer, state, detail } of enforcement.get(key(item.kind, item.id)) || []) {
    const badge = document.createElement("span");
    badge.className = `badge state-${state}`;
    badge.textContent = STATES[state] || state;
    const said = `${enforcer}: ${STATES[state] || state}${detail ? " — " + detail : ""}`;
    badge.title = said;
    badge.setAttribute("aria-label", said);
    span.append(badge);
  }
  return span;
}

// The sources that hold each block: an item's `heldBy` (absent while its `source` alone
// holds it). The feed's items do not carry it, so an item merged or updated by the feed is
// read again when its row comes into view.
let staleHandler = () => {};

export function onStale(handler) {
  staleHandler = handler;
}

function holdersOf(item) {
  return (item.heldBy && item.heldBy.length ? item.heldBy : [item.source]).join(", ");
}

function taskManagersOf(item) {
  return item.kind === "node" ? [...(onNode.get(item.id) || [])].sort() : [];
}

const grid = document.getElementById("grid");
const spacer = document.getElementById("grid-spacer");
const rows = document.getElementById("grid-rows");
const count = document.getElementById("count");

let view = [];
let stale = true;
let scheduled = false;
let lastBuild = 0;
let selectHandler = () => {};
// The row keyboard focus is on (one row is in the tab order: a roving tabindex), by key.
let focusKey = null;

export function onSelect(handler) {
  selectHandler = handler;
}

export function key(kind, id) {
  return kind + "/" + id;
}

export function put(item, holdersKnown = true) {
  if (!holdersKnown) {
    // Keep what was shown until the item is read again.
    const before = items.get(key(item.kind, item.id));
    item.heldBy = before ? before.heldBy : undefined;
    item.holdersStale = true;
  }
  items.set(key(item.kind, item.id), item);
  changed();
}

export function remove(kind, id) {
  if (items.delete(key(kind, id))) changed();
}

export function replaceAll(list) {
  items.clear();
  for (const item of list) items.set(key(item.kind, item.id), item);
  changed();
}

export function changed() {
  stale = true;
  schedule();
}

function schedule() {
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(() => {
    scheduled = false;
    const wait = items.size > 20000 ? 250 - (performance.now() - lastBuild) : 0;
    if (stale && wait > 0) setTimeout(schedule, wait);
    else if (stale) build();
    // The current view is painted either way: scrolling never waits for a rebuild.
    paint();
  });
}

function filters() {
  const value = (id) => document.getElementById(id).value;
  return {
    kind: value("f-kind"),
    action: value("f-action"),
    source: value("f-source").trim(),
    text: value("f-text").trim().toLowerCase(),
    sort: value("f-sort"),
  };
}

function build() {
  const f = filters();
  view = [];
  for (const item of items.values()) {
    if (f.kind && item.kind !== f.kind) continue;
    if (f.action && item.action !== f.action) continue;
    if (f.source && item.source !== f.source && !(item.heldBy || []).includes(f.source)) continue;
    if (f.text && !item.id.toLowerCase().includes(f.text) && !item.cause.toLowerCase().includes(f.text)) continue;
    view.push(item);
  }
  const byId = (a, b) => (a.kind < b.kind ? -1 : a.kind > b.kind ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  view.sort(f.sort === "id" ? byId : (a, b) => a.endTimestamp - b.endTimestamp || byId(a, b));
  stale = false;
  lastBuild = performance.now();
  count.textContent = `(${view.length}${view.length === items.size ? "" : " of " + items.size})`;
  spacer.style.height = view.length * ROW_HEIGHT + "px";
}

export function ends(end) {
  if (end >= PERMANENT) return "permanent";
  const left = end - Date.now();
  return `${duration(left)} · ${new Date(end).toLocaleString()}`;
}

export function duration(ms) {
  if (ms <= 0) return "ending";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s left`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s left`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m left`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h left`;
}

function cell(text, cls) {
  const span = document.createElement("span");
  span.setAttribute("role", "cell");
  if (cls) span.className = cls;
  span.textContent = text;
  return span;
}

function paint() {
  const first = Math.max(0, Math.floor(grid.scrollTop / ROW_HEIGHT) - 5);
  const shown = Math.ceil(grid.clientHeight / ROW_HEIGHT) + 10;
  const fragment = document.createDocumentFragment();
  for (let i = first; i < Math.min(view.length, first + shown); i++) {
    const item = view[i];
    const row = document.createElement("div");
    row.className = "row";
    row.setAttribute("role", "row");
    row.dataset.key = key(item.kind, item.id);
    row.tabIndex = row.dataset.key === focusKey || (focusKey === null && i === first) ? 0 : -1;
    row.setAttribute("aria-rowindex", String(i + 2));
    row.style.top = i * ROW_HEIGHT + "px";
    const evacuate = item.action === "MARK_BLOCKED_AND_EVACUATE_TASKS";
    row.append(
      cell(item.kind === "node" ? "node" : "task manager"),
      cell(item.id, "id"),
      cell(evacuate ? "EVACUATE" : "BLOCKED", evacuate ? "evacuate" : "blocked"),
      enforcementCell(item),
      cell(ends(item.endTimestamp)),
      cell(item.cause),
      cell(`${holdersOf(item)} (${item.reportCount})`, "holders"),
      cell(taskManagersOf(item).join(", ")),
    );
    if (item.holdersStale) staleHandler(item);
    fragment.append(row);
  }
  const hadFocus = grid.contains(document.activeElement);
  rows.replaceChildren(fragment);
  document.getElementById("table").setAttribute("aria-rowcount", String(view.length + 1));
  if (hadFocus) {
    const focused = focusKey && rows.querySelector(`[data-key="${CSS.escape(focusKey)}"]`);
    if (focused) focused.focus({ preventScroll: true });
    else grid.focus({ preventScroll: true });
  }
}

// Moves the keyboard focus `by` rows through the view (not only the rows in the page),
// scrolling as needed.
function moveFocus(by) {
  let index = view.findIndex((item) => key(item.kind, item.id) === focusKey);
  index = Math.max(0, Math.min(view.length - 1, (index < 0 ? 0 : index + by)));
  if (!view.length) return;
  const item = view[index];
  focusKey = key(item.kind, item.id);
  const top = index * ROW_HEIGHT;
  if (top < grid.scrollTop) grid.scrollTop = top;
  else if (top + ROW_HEIGHT > grid.scrollTop + grid.clientHeight) grid.scrollTop = top + ROW_HEIGHT - grid.clientHeight;
  paint();
  const row = rows.querySelector(`[data-key="${CSS.escape(focusKey)}"]`);
  if (row) row.focus({ preventScroll: true });
}

// Puts the keyboard focus back on the row of `itemKey` (after its detail closes).
export function focusRow(itemKey) {
  focusKey = itemKey;
  const row = rows.querySelector(`[data-key="${CSS.escape(itemKey)}"]`);
  if (row) row.focus();
  else grid.focus();
}

grid.addEventListener("scroll", () => schedule(), { passive: true });
window.addEventListener("resize", () => schedule());
for (const id of ["f-kind", "f-action", "f-source", "f-text", "f-sort"]) {
  document.getElementById(id).addEventListener("input", changed);
}
document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
rows.addEventListener("click", (e) => {
  const row = e.target.closest(".row");
  if (row) selectHandler(items.get(row.dataset.key));
});
rows.addEventListener("focusin", (e) => {
  const row = e.target.closest(".row");
  if (row) focusKey = row.dataset.key;
});
grid.addEventListener("keydown", (e) => {
  const row = e.target.closest(".row");
  if (row && (e.key === "Enter" || e.key === " ")) {
    e.preventDefault();
    selectHandler(items.get(row.dataset.key));
  } else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
    e.preventDefault();
    moveFocus(e.key === "ArrowDown" ? 1 : -1);
  } else if (e.key === "Home" || e.key === "End") {
    e.preventDefault();
    moveFocus(e.key === "Home" ? -view.length : view.length);
  }
});
// The countdowns: the rows in view only.
setInterval(() => schedule(), 1000);
