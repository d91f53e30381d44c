// reconciler ops console: the live feed. Optional: every page works without
// it. It opens /console/events (Server-Sent Events of the resolution
// events this session may see) and lists each event at the top of the
// page, with a link to the row; on a row's page an event of that row says
// the page is out of date.
(function () {
  "use strict";
  var box = document.getElementById("live");
  if (!box || !window.EventSource) { return; }
  var list = box.querySelector("ul");
  var here = new URLSearchParams(location.search);
  var onRow = location.pathname === "/console/row";
  var es = new EventSource("/console/events");
  es.onopen = function () { box.dataset.state = "open"; };
  es.onerror = function () { box.dataset.state = "retrying"; };
  es.addEventListener("resolution", function (msg) {
    var ev;
    try { ev = JSON.parse(msg.data); } catch (e) { return; }
    box.hidden = false;
    var li = document.createElement("li");
    var a = document.createElement("a");
    a.href = "/console/row?" + new URLSearchParams({ tenant: ev.tenant, key: ev.key }).toString();
    a.textContent = ev.tool + " " + ev.key.slice(0, 12);
    li.appendChild(a);
    li.appendChild(document.createTextNode(" → " + ev.status + (ev.source ? " (" + ev.source + ")" : "") +
      " · " + ev.tenant + " · run " + ev.run_id));
    if (onRow && ev.key === here.get("key") && ev.tenant === here.get("tenant")) {
      li.appendChild(document.createTextNode(" — this row changed: "));
      var r = document.createElement("a");
      r.href = location.pathname + location.search;
      r.textContent = "reload";
      li.appendChild(r);
    }
    list.insertBefore(li, list.firstChild);
    while (list.children.length > 20) { list.removeChild(list.lastChild); }
  });
  es.addEventListener("signedout", function () { es.close(); });
})();
