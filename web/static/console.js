// Switchyard console: the Live switch. htmx polls each page's live region
// every two seconds while switchyardLive() says so. Live updates pause when
// the operator switches them off (remembered in this browser), and while
// they read or act inside a live region — an open disclosure (a payload, a
// confirmation) or a focused field — so nothing changes under their hands.
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
    if (document.querySelector(".live details[open]")) {
      return false;
    }
    var f = document.activeElement;
    if (f && f.closest && f.closest(".live") && /^(INPUT|TEXTAREA|SELECT)$/.test(f.tagName)) {
      return false;
    }
    return true;
  };

  document.addEventListener("DOMContentLoaded", function () {
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
    if (xhr.status === 304) {
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
