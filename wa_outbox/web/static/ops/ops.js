// wa-outbox ops: confirmations for destructive buttons, auto-refresh (on unless paused), "/" to search. No
// dependencies; served from /ops/static like the stylesheet (the CSP allows no inline script).
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) { event.preventDefault(); }
  });

  // Auto-refresh: on by default; unticking the box pauses it, and the choice is kept in this browser
  // (localStorage) for every /ops page. A reload waits while a form field has the focus (it would lose what is being
  // typed or chosen) and while the tab is hidden (nobody is looking; it reloads when shown again).
  var REFRESH_KEY = "wa-outbox-ops-auto-refresh";
  var REFRESH_SECONDS = 10;
  var left = REFRESH_SECONDS;
  var ticker = null;

  function busy() {
    var active = document.activeElement;
    return !!active && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName) && active.id !== "auto-refresh";
  }

  function say(text) {
    var status = document.getElementById("refresh-status");
    if (status) { status.textContent = text; }
  }

  function tick() {
    if (document.hidden || busy()) { say("waiting"); return; }
    left -= 1;
    if (left <= 0) { say("refreshing"); stop(); location.reload(); return; }
    say("in " + left + " s");
  }

  function stop() {
    if (ticker) { clearInterval(ticker); ticker = null; }
  }

  function run(on) {
    stop();
    left = REFRESH_SECONDS;
    document.documentElement.setAttribute("data-auto-refresh", on ? "on" : "paused");
    if (on) { say("in " + left + " s"); ticker = setInterval(tick, 1000); } else { say("paused"); }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("auto-refresh");
    if (!box) { return; }
    box.checked = localStorage.getItem(REFRESH_KEY) !== "off";
    box.addEventListener("change", function () {
      localStorage.setItem(REFRESH_KEY, box.checked ? "on" : "off");
      run(box.checked);
    });
    run(box.checked);
  });

  document.addEventListener("keydown", function (event) {
    var q = document.getElementById("q");
    if (event.key === "/" && q && document.activeElement !== q && !/INPUT|TEXTAREA|SELECT/.test(document.activeElement.tagName)) {
      event.preventDefault();
      q.focus();
    }
  });
})();
