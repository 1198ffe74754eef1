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
        if (live.terminal) { root.dataset.terminal = "true"; return; }  // stop polling
        window.setTimeout(poll, every);
      })
      .catch(function () { window.setTimeout(poll, every * 2); });
  }
  window.setTimeout(poll, every);
})();
