// The operator console: the live blocklist (list, then follow the feed from the listed
// revision), an item's reports and past blocks, the guardrails, and the writes, each
// tried first as a dry run.

import { call, errorsOf, follow, onUnauthorized, pages, setToken, token } from "./api.js";
import { idsOf, show, wire } from "./forms.js";
import * as table from "./table.js";

const status = document.getElementById("feed-status");
const revisionShown = document.getElementById("feed-revision");
const banner = document.getElementById("banner");
let revision = 0;

// The badge is a live region: it changes with the feed's state only; the revision beside
// it is not announced.
function setStatus(state, text) {
  if (status.dataset.state !== state) {
    status.dataset.state = state;
    status.textContent = text;
  }
  revisionShown.textContent = `revision ${revision}`;
}

function say(message) {
  banner.textContent = message;
  banner.hidden = !message;
}

onUnauthorized(() => {
  say(token() ? "Token missing or wrong: the daemon refused the token given." : "Token missing or wrong: this daemon needs a token; enter it above.");
});

// --- the live table ---------------------------------------------------------------------

async function list() {
  // In pages, so no answer is bigger than a page however long the list; the registrations
  // after the blocklist, so they are listed at or after its revision.
  const answer = await pages("/blocklist");
  if (answer.status !== 200) throw answer;
  const registered = await pages("/taskmanagers");
  if (registered.status !== 200) throw registered;
  const all = [
    ...answer.body.blockedTaskManagers.map((i) => ({ ...i, kind: "taskmanager" })),
    ...answer.body.blockedNodes.map((i) => ({ ...i, kind: "node" })),
  ];
  table.registrations(registered.body);
  table.replaceAll(all);
  statusesChanged();
  // The registrations were listed at or after the blocklist's revision; replaying their
  // events from it again converges, as the feed's events carry the state after them.
  revision = answer.body.revision;
}

function apply(e) {
  if (Number.isFinite(e.id)) revision = e.id;
  const d = e.data;
  switch (e.event) {
    case "added":
      table.put(d);
      break;
    case "merged":
    case "updated":
      table.put(d, false);
      break;
    case "removed":
    case "expired":
      table.remove(d.kind, d.id);
      break;
    case "registered":
      table.registered(d.id, d.node);
      break;
    case "unregistered":
      table.unregistered(d.id);
      break;
    default:
      break;
  }
  // Every change may move a figure of the guardrails: refreshed at most twice a second.
  guardsChanged();
  statusesChanged();
  if (selected && d && selected.kind === d.kind && selected.id === d.id) detailChanged();
  setStatus("live", "live");
}

// The sources that hold an item the feed changed: read again when its row is in view,
// each item once at a time.
const reading = new Set();
table.onStale(async (item) => {
  const k = table.key(item.kind, item.id);
  if (reading.has(k)) return;
  reading.add(k);
  try {
    const answer = await call("GET", `/blocklist/${item.kind === "node" ? "nodes" : "taskmanagers"}/${encodeURIComponent(item.id)}`);
    const now = table.items.get(k);
    if (now !== item) return; // changed again meanwhile: its own read follows
    if (answer.status === 200) {
      item.heldBy = answer.body.heldBy;
      item.holdersStale = false;
      table.changed();
    } else if (answer.status === 404) {
      item.holdersStale = false;
    }
  } finally {
    reading.delete(k);
  }
});

// The enforcers' statuses: read again after changes (at most twice a second) and every 5 s,
// as a status emits no event of its own.
let statusesDue = null;
function statusesChanged() {
  if (statusesDue) return;
  statusesDue = setTimeout(async () => {
    statusesDue = null;
    const answer = await call("GET", "/enforcement");
    if (answer.status === 200) table.statuses(answer.body);
  }, 500);
}
setInterval(statusesChanged, 5000);

// No byte for this long (the daemon sends a heartbeat every 15 s by default): the
// connection is dead even if no one closed it.
const SILENCE_MS = 45000;

let listed = false;
let feedAbort = null;
async function feed() {
  let backoff = 250;
  for (;;) {
    const controller = new AbortController();
    feedAbort = controller;
    try {
      if (!listed) {
        await list();
        listed = true;
      }
      await follow(
        revision,
        controller.signal,
        SILENCE_MS,
        () => {
          backoff = 250;
          say("");
          setStatus("live", "live");
        },
        apply,
      );
    } catch (problem) {
      if (problem && problem.status === 410) listed = false; // behind the log: list again
      if (problem && problem.status === 401) {
        setStatus("refused", "token missing or wrong");
        await tokenChanged();
        listed = false;
        continue;
      }
    }
    if (controller.signal.aborted && controller.signal.reason === "token") {
      listed = false; // a new token: list again with it, at once
      continue;
    }
    setStatus("reconnecting", "reconnecting");
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 4000);
  }
}

// Resolves at the next change of the token (entered or forgotten).
let tokenWaiters = [];
function tokenChanged() {
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

function useToken(value) {
  setToken(value);
  say("");
  table.replaceAll([]);
  if (feedAbort) feedAbort.abort("token");
  const waiters = tokenWaiters;
  tokenWaiters = [];
  for (const resolve of waiters) resolve();
  refreshGuards();
}

document.getElementById("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const input = document.getElementById("token");
  const value = input.value.trim();
  input.value = "";
  useToken(value);
});
document.getElementById("token-clear").addEventListener("click", () => useToken(""));

// --- an item ----------------------------------------------------------------------------

let selected = null;
const detail = document.getElementById("detail");

function text(value) {
  return value === undefined || value === null ? "" : String(value);
}

function fillRows(tbody, rows) {
  tbody.replaceChildren(
    ...rows.map((cells) => {
      const tr = document.createElement("tr");
      for (const c of cells) {
        const td = document.createElement("td");
        td.textContent = text(c);
        tr.append(td);
      }
      return tr;
    }),
  );
}

function when(ms) {
  return new Date(ms).toLocaleString();
}

// Each refresh of the detail is numbered: only the latest one's answers are shown, for the
// item selected when it was asked.
let detailRequest = 0;
async function detailChanged() {
  if (!selected) return;
  const asked = ++detailRequest;
  const shown = selected;
  const path = `/blocklist/${shown.kind === "node" ? "nodes" : "taskmanagers"}/${encodeURIComponent(shown.id)}`;
  const [item, past] = await Promise.all([call("GET", path), call("GET", path + "/history")]);
  if (asked !== detailRequest || selected !== shown) return;
  const fields = document.getElementById("detail-fields");
  const entries = item.status === 200
    ? [
        ["kind", shown.kind], ["id", shown.id], ["action", item.body.action],
        ["ends", table.ends(item.body.endTimestamp)], ["started", when(item.body.startTimestamp)],
        ["cause", item.body.cause], ["source", item.body.source],
        ["held by", (item.body.heldBy || [item.body.source]).join(", ")], ["reports", item.body.reportCount],
        ...Object.entries(item.body.enforcement || {}).map(([enforcer, st]) => [
          `enforcement (${enforcer})`,
          `${st.state} since ${when(st.since)}${st.detail ? ": " + st.detail : ""}`,
        ]),
      ]
    : [["kind", shown.kind], ["id", shown.id], ["state", "not blocked now"]];
  fields.replaceChildren(
    ...entries.flatMap(([k, v]) => {
      const dt = document.createElement("dt");
      dt.textContent = k;
      const dd = document.createElement("dd");
      dd.textContent = text(v);
      return [dt, dd];
    }),
  );
  // The live reports: kept apart only when more than the block itself holds it.
  const live = item.status !== 200 ? [] : item.body.liveReports || [{
    source: item.body.source, action: item.body.action, endTimestamp: item.body.endTimestamp, cause: item.body.cause,
  }];
  fillRows(document.querySelector("#live tbody"), live.map((r) => [
    r.source, r.action, table.ends(r.endTimestamp), r.cause,
    Object.entries(r.details || {}).map(([k, v]) => `${k}=${v}`).join(" "),
  ]));
  const reports = item.status === 200 ? item.body.reports || [] : [];
  fillRows(document.querySelector("#reports tbody"), reports.map((r) => [when(r.timestamp), r.source, r.operation, r.action, r.cause]));
  const blocks = past.status === 200 ? past.body : [];
  fillRows(
    document.querySelector("#past tbody"),
    blocks.map((b) => [when(b.ended.timestamp), b.ended.how, b.ended.source, b.ended.reason, b.action, b.cause]),
  );
}

table.onSelect((item) => {
  if (!item) return;
  selected = { kind: item.kind, id: item.id };
  detail.hidden = false;
  document.getElementById("detail-title").textContent = `${item.kind === "node" ? "Node" : "Task manager"} ${item.id}`;
  for (const form of detail.querySelectorAll("form")) form.querySelector("output").replaceChildren();
  detailChanged();
  document.getElementById("detail-close").focus();
});
document.getElementById("detail-close").addEventListener("click", () => {
  const closed = selected;
  selected = null;
  detail.hidden = true;
  if (closed) table.focusRow(table.key(closed.kind, closed.id));
});

function itemPath() {
  return `/blocklist/${selected.kind === "node" ? "nodes" : "taskmanagers"}/${encodeURIComponent(selected.id)}`;
}

wire(document.getElementById("update-form"), () => {
  const body = {};
  const end = document.getElementById("u-end").value;
  if (end === "permanent") body.permanent = true;
  if (end === "timeout") body.timeout = Number(document.getElementById("u-minutes").value) * 60000;
  const action = document.getElementById("u-action").value;
  if (action) body.action = action;
  const cause = document.getElementById("u-cause").value;
  if (cause) body.cause = cause;
  return ["PATCH", itemPath(), body];
});

wire(document.getElementById("remove-form"), () => [
  "DELETE",
  itemPath(),
  undefined,
  { reason: document.getElementById("r-reason").value, holdOff: document.getElementById("r-holdoff").value.trim() },
]);

// --- add --------------------------------------------------------------------------------

wire(document.getElementById("add-form"), () => {
  const ids = idsOf(document.getElementById("a-ids").value);
  if (!ids.length) throw new Error("id: give at least one id");
  const minutes = document.getElementById("a-minutes").value;
  const source = document.getElementById("a-source").value.trim();
  const elements = ids.map((id) => {
    const element = {
      id,
      action: document.getElementById("a-action").value,
      cause: document.getElementById("a-cause").value,
      allowMerge: document.getElementById("a-merge").checked,
    };
    if (minutes !== "") element.timeout = Math.round(Number(minutes) * 60000);
    if (source) element.source = source;
    return element;
  });
  return ["POST", "/blocklist/" + document.getElementById("a-kind").value, elements];
});

// --- guardrails -------------------------------------------------------------------------

function figure(label, share) {
  if (!share) return `${label}: off`;
  const cap = share.cap === null ? "no cap" : `cap ${share.cap}`;
  const headroom = share.headroom === null ? "" : `, headroom ${share.headroom}`;
  return `${label}: ${share.current} (${cap}${headroom})`;
}

async function refreshGuards() {
  const [policyStatus, allow, policy, metrics] = await Promise.all([
    call("GET", "/policy/status"),
    call("GET", "/allowlist"),
    call("GET", "/policy"),
    fetch("/metrics").then((r) => (r.ok ? r.text() : "")).catch(() => ""),
  ]);
  const figures = document.getElementById("guard-figures");
  if (policyStatus.status === 200) {
    figures.replaceChildren(
      ...[["taskManagers", "Task managers"], ["nodes", "Nodes"]].map(([k, label]) => {
        const s = policyStatus.body[k];
        const div = document.createElement("div");
        div.className = "guard";
        const h = document.createElement("h3");
        h.textContent = label;
        const ul = document.createElement("ul");
        const lines = [
          `items: ${s.items}` + (s.maxBlocked === null ? "" : ` of ${s.maxBlocked} (headroom ${s.headroom})`),
          `registered: ${s.registered}`,
          figure("blocked", s.blockedShare),
          figure("evacuating", s.evacuatingShare),
          s.evacuations ? `evacuations: ${s.evacuations.available} of ${s.evacuations.burst} available, ${s.evacuations.perMinute}/min` : "evacuations: no rate",
        ];
        ul.replaceChildren(...lines.map((l) => Object.assign(document.createElement("li"), { textContent: l })));
        div.append(h, ul);
        return div;
      }),
    );
  } else {
    figures.textContent = errorsOf(policyStatus).join("; ");
  }
  const refusals = [...metrics.matchAll(/^blocklist_guard_refusals_total\{guard="([^"]+)"\} (\d+)/gm)].filter(
    ([, , n]) => n !== "0",
  );
  document.getElementById("refusals").replaceChildren(
    ...(refusals.length ? refusals : [[null, "none since the daemon started", ""]]).map(([, guard, n]) =>
      Object.assign(document.createElement("li"), { textContent: n === "" ? guard : `${guard}: ${n}` }),
    ),
  );
  const tbody = document.querySelector("#allowlist tbody");
  const entries = allow.status === 200 ? allow.body.entries : [];
  tbody.replaceChildren(
    ...entries.map((entry) => {
      const tr = document.createElement("tr");
      for (const v of [entry.kind, entry.id + (entry.prefix ? "*" : ""), entry.endTimestamp === null ? "until removed" : when(entry.endTimestamp), entry.comment]) {
        tr.append(Object.assign(document.createElement("td"), { textContent: v }));
      }
      const td = document.createElement("td");
      const button = Object.assign(document.createElement("button"), { type: "button", textContent: "Delete" });
      button.setAttribute("aria-label", `Delete the allowlist entry ${entry.kind} ${entry.id}`);
      button.addEventListener("click", async () => {
        // Deleting a safety entry lets its ids be blocked again: asked first.
        if (!window.confirm(`Delete the allowlist entry ${entry.kind} ${entry.id}? Its ids may be blocked again.`)) return;
        const answer = await call("DELETE", `/allowlist/${entry.kind === "node" ? "nodes" : "taskmanagers"}/${encodeURIComponent(entry.id)}`);
        if (answer.status !== 200) say(errorsOf(answer).join("; "));
        refreshGuards();
      });
      td.append(button);
      tr.append(td);
      return tr;
    }),
  );
  const textarea = document.getElementById("p-json");
  // An edit in progress is never overwritten; a saved one is replaced by what is stored.
  if (policy.status === 200 && !policyEdited) textarea.value = JSON.stringify(policy.body, null, 2);
}

let guardTimer = null;
function guardsChanged() {
  if (guardTimer === null) guardTimer = setTimeout(() => {
    guardTimer = null;
    refreshGuards();
  }, 500);
}

wire(
  document.getElementById("allow-form"),
  () => [
    "PUT",
    `/allowlist/${document.getElementById("w-kind").value}/${encodeURIComponent(document.getElementById("w-id").value.trim())}`,
    { comment: document.getElementById("w-comment").value },
  ],
  () => refreshGuards(),
);

let policyEdited = false;
document.getElementById("p-json").addEventListener("input", () => {
  policyEdited = true;
});

wire(
  document.getElementById("policy-form"),
  () => {
  let body;
  try {
    body = JSON.parse(document.getElementById("p-json").value);
  } catch (e) {
    throw new Error("policy: not JSON: " + e.message);
  }
  return ["PUT", "/policy", body];
  },
  (answer, dry) => {
    if (!dry && answer.status === 200) {
      policyEdited = false;
      refreshGuards();
    }
  },
);

// The evacuation buckets refill with time, not with events.
setInterval(refreshGuards, 5000);
refreshGuards();
feed();
