// Switchyard console: the Live switch, the theme switch and the keyboard.
//
// Live: htmx polls each page's live region every two seconds while
// switchyardLive() says so. Live updates pause when the operator switches
// them off (remembered in this browser), and while they read or act inside a
// live region — an open disclosure (a payload, a confirmation), a focused
// field, or rows chosen for a bulk action — so nothing changes under their
// hands.
//
// Theme: the header's switch is a POST form (it works without JavaScript);
// here it sets the same cookie the server reads and switches in place.
//
// Keyboard: "/" focuses the search box, "j" and "k" select the next and
// previous row of the page's lists, Enter opens the selected row's link and
// "?" lists the keys; in a chart the arrow keys, Home and End move through
// its bars. None of them act while the operator types in a field.
(function () {
  "use strict";
  var KEY = "switchyard.live";

  var on = true;
  try {
    on = window.localStorage.getItem(KEY) !== "off";
  } catch (e) {
    // No storage (private mode): live by default.
  }

  window.switchyardLive = function () {
    if (!on || document.hidden) {
      return false;
    }
    if (document.querySelector(".live details[open]") || document.querySelector(".live input[type=checkbox][form]:checked")) {
      return false;
    }
    var f = document.activeElement;
    if (f && f.closest && f.closest(".live") && /^(INPUT|TEXTAREA|SELECT)$/.test(f.tagName)) {
      return false;
    }
    return true;
  };

  function setUpLive() {
    var box = document.getElementById("live-toggle");
    if (!box) {
      return;
    }
    var label = box.closest("label");
    if (label) {
      label.hidden = false;
    }
    box.checked = on;
    document.body.classList.toggle("paused", !on);
    box.addEventListener("change", function () {
      on = box.checked;
      try {
        window.localStorage.setItem(KEY, on ? "on" : "off");
      } catch (e) {
        // Private mode: the switch still works for this page.
      }
      document.body.classList.toggle("paused", !on);
    });
  }

  // The theme switch: the cookie web/theme.go reads, for a year.
  function setUpTheme() {
    var form = document.querySelector("form.theme-switch");
    if (!form) {
      return;
    }
    form.addEventListener("submit", function (ev) {
      var button = ev.submitter;
      if (!button || (button.value !== "light" && button.value !== "dark")) {
        return;
      }
      ev.preventDefault();
      document.cookie = "switchyard_theme=" + button.value + "; Path=/admin; Max-Age=31536000; SameSite=Lax" +
        (location.protocol === "https:" ? "; Secure" : "");
      document.documentElement.setAttribute("data-theme", button.value);
      // The pressed button hides; the other one takes the focus.
      var other = form.querySelector(button.value === "dark" ? ".to-light" : ".to-dark");
      if (other && document.activeElement === button) {
        other.focus();
      }
    });
  }

  // The rows j and k move through: table rows, list items and threads.
  var ROWS = "main tbody tr, main .items > li, main .inbox > li, main .timeline > li, main .funnel > li, main .messages > li";
  var current = -1;

  function rows() {
    return Array.prototype.filter.call(document.querySelectorAll(ROWS), function (r) {
      return r.offsetParent !== null;
    });
  }

  function select(i, focus) {
    var all = rows();
    if (all.length === 0) {
      return;
    }
    var old = document.querySelector(".kb-row");
    if (old) {
      old.classList.remove("kb-row");
    }
    current = Math.max(0, Math.min(i, all.length - 1));
    var row = all[current];
    row.classList.add("kb-row");
    if (focus) {
      if (!row.hasAttribute("tabindex")) {
        row.setAttribute("tabindex", "-1");
      }
      row.focus({ preventScroll: true });
      row.scrollIntoView({ block: "nearest" });
    }
  }

  function typing(el) {
    return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }

  // chartKey moves the focus through a chart's bars (a roving tab stop: the
  // newest bar is the chart's one stop in the tab order) with the arrow
  // keys, Home and End. It reports whether it took the key.
  function chartKey(ev) {
    var bar = ev.target.closest && ev.target.closest(".chart .bar-g");
    if (!bar) {
      return false;
    }
    var bars = Array.prototype.slice.call(bar.parentNode.querySelectorAll(".bar-g"));
    var i = bars.indexOf(bar);
    var to = { ArrowLeft: i - 1, ArrowRight: i + 1, Home: 0, End: bars.length - 1 }[ev.key];
    if (to === undefined) {
      return false;
    }
    ev.preventDefault();
    var next = bars[Math.max(0, Math.min(to, bars.length - 1))];
    bar.setAttribute("tabindex", "-1");
    next.setAttribute("tabindex", "0");
    next.focus();
    return true;
  }

  function onKey(ev) {
    if (ev.defaultPrevented || ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev.target)) {
      return;
    }
    if (chartKey(ev)) {
      return;
    }
    var dialog = document.getElementById("keys-dialog");
    if (dialog && dialog.open) {
      return; // the dialog closes with Esc by itself
    }
    switch (ev.key) {
    case "/":
      var box = document.getElementById("search-q");
      if (box) {
        ev.preventDefault();
        box.focus();
        box.select();
      }
      break;
    case "j":
      ev.preventDefault();
      select(current + 1, true);
      break;
    case "k":
      ev.preventDefault();
      select(current < 0 ? 0 : current - 1, true);
      break;
    case "Enter":
      var row = document.querySelector(".kb-row");
      if (row && document.activeElement === row) {
        var link = row.querySelector("a[href]");
        if (link) {
          ev.preventDefault();
          link.click();
        }
      }
      break;
    case "?":
      if (dialog && dialog.showModal) {
        ev.preventDefault();
        dialog.showModal();
      }
      break;
    }
  }

  // labelTables gives every cell of the page's tables its column's heading
  // (data-label), which console.css shows above the value at phone width,
  // where a table's rows wrap into stacked cells.
  function labelTables(root) {
    Array.prototype.forEach.call(root.querySelectorAll("table"), function (table) {
      var ths = table.querySelectorAll("thead th");
      var heads = Array.prototype.map.call(ths, function (th) {
        return th.textContent.trim();
      });
      // The first column names the row, unless it is a number (a partition).
      var first = ths.length > 0 && ths[0].classList.contains("n") ? 0 : 1;
      if (heads.length === 0) {
        return;
      }
      Array.prototype.forEach.call(table.querySelectorAll("tbody tr"), function (tr) {
        var col = 0;
        Array.prototype.forEach.call(tr.children, function (cell) {
          if (col >= first && heads[col] && !cell.hasAttribute("colspan")) {
            cell.setAttribute("data-label", heads[col]);
          }
          col += cell.colSpan || 1;
        });
      });
      table.classList.add("labelled");
    });
  }

  // A live refresh replaces the rows: select the same position again.
  function reselect() {
    if (current < 0 || document.querySelector(".kb-row")) {
      return;
    }
    var lost = document.activeElement === document.body || document.activeElement === null;
    select(current, lost);
  }

  document.addEventListener("DOMContentLoaded", function () {
    setUpLive();
    setUpTheme();
    document.addEventListener("keydown", onKey);
    labelTables(document);
    document.body.addEventListener("htmx:afterSwap", function (ev) {
      labelTables(ev.target);
      reselect();
    });
  });
})();

// ---- Live refresh: only what changed (issue 20) ----------------------------
// Each poll of a live region sends back, as If-None-Match, the ETag of the
// fragment the region shows; the server answers 304 with no body when the
// fragment is the same. htmx 2 would swap that empty body in like any 2xx/3xx
// answer and blank the region, so a 304 is kept from swapping here.
(function () {
  "use strict";

  function liveRegion(elt) {
    return elt && elt.classList && elt.classList.contains("live") ? elt : null;
  }

  document.addEventListener("htmx:configRequest", function (evt) {
    var region = liveRegion(evt.detail.elt);
    if (region && region.dataset.etag) {
      evt.detail.headers["If-None-Match"] = region.dataset.etag;
    }
  });

  document.addEventListener("htmx:beforeSwap", function (evt) {
    var region = liveRegion(evt.detail.elt);
    var xhr = evt.detail.xhr;
    if (!region || !xhr) {
      return;
    }
    // A poll that was in flight when the operator paused live updates (or
    // opened a payload, ticked a row) is dropped: nothing changes under
    // their hands. The region keeps its tag, so the next poll compares
    // against what it shows.
    if (xhr.status === 304 || (window.switchyardLive && !window.switchyardLive())) {
      evt.detail.shouldSwap = false;
      return;
    }
    if (xhr.status === 200) {
      var tag = xhr.getResponseHeader("ETag");
      if (tag) {
        region.dataset.etag = tag;
      } else {
        delete region.dataset.etag;
      }
    }
  });
})();
// ---- end of live refresh ----------------------------------------------------
