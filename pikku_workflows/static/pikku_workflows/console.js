// The graph's zoom: fitted to the page's width (CSS), or at its actual size, scrolled.
(function () {
  "use strict";
  var box = document.getElementById("pk-graph");
  if (!box) { return; }
  var button = document.createElement("button");
  button.type = "button";
  button.className = "pk-zoom";
  function label() {
    var actual = box.classList.contains("pk-zoom-actual");
    button.textContent = actual ? "Fit the graph to the width" : "Show the graph at actual size";
    button.setAttribute("aria-pressed", actual ? "true" : "false");
  }
  button.addEventListener("click", function () {
    box.classList.toggle("pk-zoom-actual");
    label();
  });
  label();
  box.parentNode.insertBefore(button, box);
})();

// Live refresh of a run page: poll the run's small JSON endpoint while the run is live.
(function () {
  "use strict";
  var root = document.getElementById("pk-run");
  if (!root || root.dataset.terminal === "true") { return; }
  var url = root.dataset.liveUrl + window.location.search;
  var every = 2000;
  function replace(id, html) {
    var node = document.getElementById(id);
    if (node && typeof html === "string") { node.innerHTML = html; }
  }
  function poll() {
    fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (live) {
        if (!live) { window.setTimeout(poll, every * 2); return; }
        replace("pk-summary", live.summary);
        replace("pk-graph", live.graph);
        replace("pk-timeline", live.timeline);
        replace("pk-steps", live.steps);
        replace("pk-tools", live.tools);
        replace("pk-audit", live.audit);
        if (live.terminal) { root.dataset.terminal = "true"; return; }  // stop polling
        window.setTimeout(poll, every);
      })
      .catch(function () { window.setTimeout(poll, every * 2); });
  }
  window.setTimeout(poll, every);
})();
