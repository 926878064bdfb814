// remat dashboard: draw the figures a page carries in #page-data, and keep a live page up to date by
// polling its data URL until the work behind it has ended. Sets <body data-ready> once the first draw is
// done (data-ready-ms: milliseconds since navigation started), which tests and benchmarks wait for.
(function () {
  "use strict";
  performance.mark("remat-draw-start");  // Plotly is loaded and evaluated by now
  var POLL_MS = 1000;
  var config = {responsive: true, displaylogo: false};

  function draw(figures) {
    return Promise.all(Object.keys(figures || {}).map(function (name) {
      var element = document.getElementById("plot-" + name);
      var figure = figures[name];
      return element ? Plotly.react(element, figure.data, figure.layout, config) : null;
    }));
  }

  function swap(fragments) {
    Object.keys(fragments || {}).forEach(function (id) {
      var element = document.getElementById(id);
      if (element) { element.innerHTML = fragments[id]; }
    });
  }

  function poll(url) {
    window.setTimeout(function () {
      fetch(url, {headers: {Accept: "application/json"}, credentials: "same-origin"})
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.json();
        })
        .then(function (update) {
          if (update.reload) { window.location.reload(); return; }
          swap(update.html);
          return draw(update.figures).then(function () { if (update.poll) { poll(update.poll); } });
        })
        .catch(function () { poll(url); });
    }, POLL_MS);
  }

  var page = JSON.parse(document.getElementById("page-data").textContent);
  draw(page.figures).then(function () {
    document.body.setAttribute("data-ready-ms", String(Math.round(performance.now())));
    document.body.setAttribute("data-ready", "1");
    if (page.poll) { poll(page.poll); }
  });
})();
