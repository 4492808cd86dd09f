// The console's forms: each is sent first as a dry run (?dryRun=true) and then for real, by
// its two submit buttons; the answer is shown in the form's output, and each error next to
// the field it names.

import { call, errorsOf } from "./api.js";

const STATUS_TEXT = {
  200: "OK", 201: "Created", 202: "Accepted", 400: "Bad Request", 401: "Unauthorized",
  0: "(no answer)", 403: "Forbidden", 404: "Not Found", 409: "Conflict", 412: "Precondition Failed",
  413: "Too Large", 422: "Unprocessable", 429: "Too Many Requests", 503: "Unavailable",
};

// Which field an error names: the form's fields by their data-field names, matched as the
// path the daemon's validation errors start with (".timeout: …",
// `items[0] (id "n1").timeout: …`). Anything else (a guard's refusal, a conflict)
// is shown under the form.
function fieldOf(form, message) {
  const path = /^(?:items\[\d+\](?: \(id "(?:[^"\\]|\\.)*"\))?)?\.?([A-Za-z]+)(?:\/[A-Za-z.]+)?:/.exec(message);
  if (!path) return null;
  return form.querySelector(`.field-error[data-for="${path[1]}"]`);
}

function clear(form) {
  for (const div of form.querySelectorAll(".field-error")) div.textContent = "";
  for (const input of form.querySelectorAll("[aria-invalid]")) {
    input.removeAttribute("aria-invalid");
    input.removeAttribute("aria-describedby");
  }
  form.querySelector("output").replaceChildren();
}

// Shows an answer: its status (marked a dry run when it was one), its body, and its
// errors, each beside its field when it names one.
export function show(form, answer, dry) {
  clear(form);
  const out = form.querySelector("output");
  const ok = answer.status < 300;
  const head = document.createElement("p");
  head.className = ok ? "ok" : "refused";
  const what = `${answer.status} ${STATUS_TEXT[answer.status] || ""}`.trim();
  head.textContent = dry ? `Dry run: would answer ${what}; nothing was written.` : `${what}.`;
  out.append(head);
  if (!ok) {
    const list = document.createElement("ul");
    for (const message of errorsOf(answer)) {
      const div = fieldOf(form, message);
      if (div) {
        div.textContent = message;
        div.id = div.id || `${form.id}-${div.dataset.for}-error`;
        const input = form.querySelector(`[data-field="${div.dataset.for}"]`);
        if (input) {
          input.setAttribute("aria-invalid", "true");
          input.setAttribute("aria-describedby", div.id);
        }
      } else {
        const li = document.createElement("li");
        li.textContent = message;
        list.append(li);
      }
    }
    if (list.children.length) out.append(list);
  } else if (answer.body !== null && Object.keys(answer.body).length) {
    const pre = document.createElement("pre");
    pre.textContent = JSON.stringify(answer.body, null, 2);
    out.append(pre);
  }
}

// Wires `form`: `request(dry)` gives [method, path, body, query]; `after(answer, dry)` runs
// once the answer is shown.
export function wire(form, request, after) {
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const dry = !(e.submitter && e.submitter.name === "real");
    let parts;
    try {
      parts = request(dry);
    } catch (problem) {
      show(form, { status: 400, body: { errors: [String(problem.message || problem)] } }, dry);
      return;
    }
    const [method, path, body, query] = parts;
    const answer = await call(method, path, body, { ...(query || {}), dryRun: dry ? "true" : undefined });
    show(form, answer, dry);
    if (after) after(answer, dry);
  });
}

// The ids of a pasted list: one per line or comma separated, blanks dropped.
export function idsOf(text) {
  return text.split(/[\n,]/).map((s) => s.trim()).filter((s) => s.length);
}
