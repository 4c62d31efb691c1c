// The dashboard's live parts (broker/ui/live.py): every element with a data-stream
// attribute follows the server-sent events of that URL. Output is appended as text,
// never parsed as HTML; an `html` event carries a fragment the broker rendered (and
// escaped) with the page's own templates. No framework, no build step.
"use strict";

function followLog(el, source) {
  const state = document.getElementById("log-state");
  const say = (text) => { if (state) state.textContent = text; };
  source.addEventListener("open", () => say("live"));
  source.addEventListener("error", () => say("reconnecting…"));
  source.addEventListener("log", (event) => {
    const atBottom = el.scrollTop + el.clientHeight >= el.scrollHeight - 4;
    el.append(event.data);
    if (atBottom) el.scrollTop = el.scrollHeight;
  });
  source.addEventListener("end", () => {
    say("ended: this is all of its output");
    source.close();
  });
}

function followHtml(el, source) {
  source.addEventListener("html", (event) => { el.innerHTML = event.data; });
  source.addEventListener("gone", () => {
    el.textContent = "No longer available (deleted, or not yours to see): reload the page.";
    source.close();
  });
}

for (const el of document.querySelectorAll("[data-stream]")) {
  const source = new EventSource(el.dataset.stream);
  if (el.classList.contains("log")) followLog(el, source);
  else followHtml(el, source);
}
