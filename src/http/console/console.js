// The operator console: the live blocklist (list, then follow the feed from the listed
// revision), an item's reports and past blocks, the guardrails, and the writes, each
// tried first as a dry run.

import { call, errorsOf, follow, onUnauthorized, setToken, token } from "./api.js";
import { idsOf, show, wire } from "./forms.js";
import * as table from "./table.js";

const status = document.getElementById("feed-status");
const banner = document.getElementById("banner");
let revision = 0;

function setStatus(state, text) {
  status.dataset.state = state;
  status.textContent = text;
}

function say(message) {
  banner.textContent = message;
  banner.hidden = !message;
}

onUnauthorized(() => {
  say(token() ? "Token missing or wrong: the daemon refused the token given." : "Token missing or wrong: this daemon needs a token; enter it above.");
  setStatus("refused", "token missing or wrong");
});

// --- the live table ---------------------------------------------------------------------

async function list() {
  const answer = await call("GET", "/blocklist");
  if (answer.status !== 200) throw answer;
  const all = [
    ...answer.body.blockedTaskManagers.map((i) => ({ ...i, kind: "taskmanager" })),
    ...answer.body.blockedNodes.map((i) => ({ ...i, kind: "node" })),
  ];
  table.replaceAll(all);
  revision = answer.body.revision;
}

function apply(e) {
  revision = e.id;
  const d = e.data;
  switch (e.event) {
    case "added":
    case "merged":
    case "updated": {
      const old = table.items.get(table.key(d.kind, d.id));
      // A node's task managers come from registrations, which item events do not carry.
      if (d.kind === "node" && !d.taskManagers && old) d.taskManagers = old.taskManagers;
      table.put(d);
      break;
    }
    case "removed":
    case "expired":
      table.remove(d.kind, d.id);
      break;
    case "registered":
    case "unregistered":
      registration(e.event, d);
      break;
    default:
      break;
  }
  // Every change may move a figure of the guardrails: refreshed at most twice a second.
  guardsChanged();
  if (selected && e.data && selected.kind === e.data.kind && selected.id === e.data.id) detailChanged();
  setStatus("live", `live · revision ${revision}`);
}

function registration(event, { id, node }) {
  for (const item of table.items.values()) {
    if (item.kind !== "node" || !item.taskManagers) continue;
    const had = item.taskManagers.includes(id);
    if (item.id !== node && had) item.taskManagers = item.taskManagers.filter((t) => t !== id);
  }
  const target = table.items.get(table.key("node", node));
  if (target) {
    const tms = new Set(target.taskManagers || []);
    if (event === "registered") tms.add(id);
    else tms.delete(id);
    target.taskManagers = [...tms].sort();
  }
  table.changed();
}

let listed = false;
async function feed() {
  let backoff = 250;
  for (;;) {
    try {
      if (!listed) {
        await list();
        listed = true;
      }
      await follow(
        revision,
        undefined,
        () => {
          backoff = 250;
          say("");
          setStatus("live", `live · revision ${revision}`);
        },
        apply,
      );
    } catch (problem) {
      if (problem && problem.status === 410) listed = false; // behind the log: list again
      if (problem && problem.status === 401) {
        await waitForToken();
        listed = false;
        continue;
      }
    }
    setStatus("reconnecting", `reconnecting · revision ${revision}`);
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 4000);
  }
}

let tokenGiven = () => {};
function waitForToken() {
  return new Promise((resolve) => {
    tokenGiven = resolve;
  });
}

document.getElementById("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const input = document.getElementById("token");
  setToken(input.value.trim());
  input.value = "";
  say("");
  tokenGiven();
  refreshGuards();
});
document.getElementById("token-clear").addEventListener("click", () => {
  setToken("");
  say("");
});

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

async function detailChanged() {
  if (!selected) return;
  const path = `/blocklist/${selected.kind === "node" ? "nodes" : "taskmanagers"}/${encodeURIComponent(selected.id)}`;
  const [item, past] = await Promise.all([call("GET", path), call("GET", path + "/history")]);
  const fields = document.getElementById("detail-fields");
  const entries = item.status === 200
    ? [
        ["kind", selected.kind], ["id", selected.id], ["action", item.body.action],
        ["ends", table.ends(item.body.endTimestamp)], ["started", when(item.body.startTimestamp)],
        ["cause", item.body.cause], ["source", item.body.source], ["reports", item.body.reportCount],
      ]
    : [["kind", selected.kind], ["id", selected.id], ["state", "not blocked now"]];
  fields.replaceChildren(
    ...entries.flatMap(([k, v]) => {
      const dt = document.createElement("dt");
      dt.textContent = k;
      const dd = document.createElement("dd");
      dd.textContent = text(v);
      return [dt, dd];
    }),
  );
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
  selected = null;
  detail.hidden = true;
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
  if (policy.status === 200 && document.activeElement !== textarea) textarea.value = JSON.stringify(policy.body, null, 2);
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

wire(document.getElementById("policy-form"), () => {
  let body;
  try {
    body = JSON.parse(document.getElementById("p-json").value);
  } catch (e) {
    throw new Error("policy: not JSON: " + e.message);
  }
  return ["PUT", "/policy", body];
});

// The evacuation buckets refill with time, not with events.
setInterval(refreshGuards, 5000);
refreshGuards();
feed();
