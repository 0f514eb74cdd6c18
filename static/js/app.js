// pollerdash dashboard: small progressive enhancements. Every page works without this file
// (links go to the operation page, forms post normally, times read in UTC); with it: live lists that
// never reshuffle under the pointer, inline cards, two-step confirmation, keyboard triage, fresh
// relative times, and absolute times in the viewer's own time zone (UTC on hover).
(function () {
  "use strict";

  const pd = (window.pd = window.pd || {});
  let pointerInList = false;
  let forceNext = false;
  let gPending = 0;
  let serverOffsetMs = 0;

  // --- time words ------------------------------------------------------------------------------------
  function humanDuration(seconds) {
    let sec = Math.floor(Math.abs(seconds));
    if (sec < 60) return sec + " s";
    let minutes = sec < 3600 ? Math.round(sec / 60) : Math.floor(sec / 60);
    if (minutes < 60) return minutes + " min";
    let hours = Math.floor(minutes / 60);
    minutes %= 60;
    if (hours < 24) return hours + " h" + (minutes ? " " + minutes + " min" : "");
    const days = Math.floor(hours / 24);
    hours %= 24;
    return days + " day" + (days !== 1 ? "s" : "") + (hours ? " " + hours + " h" : "");
  }

  // --- the viewer's clock ------------------------------------------------------------------------------
  // The server writes every time in UTC inside <time datetime="...">; here they become the viewer's
  // local time, with the UTC time on hover. Sentences the server wrote ("new deadline 11:15 UTC") sit
  // in [data-utc-text] elements: each "HH:MM[:SS] UTC" in them is converted the same way. Exports and
  // printable reports stay UTC.
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  const UTC_PHRASE = /\b(?:(\d{4})-(\d\d)-(\d\d) |(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (\d{1,2}) )?(\d\d):(\d\d)(?::(\d\d))? UTC\b/g;

  function pad(n) {
    return (n < 10 ? "0" : "") + n;
  }

  function zoneName(date) {
    try {
      const part = new Intl.DateTimeFormat("en-US", { timeZoneName: "short" })
        .formatToParts(date)
        .find(function (p) { return p.type === "timeZoneName"; });
      return part ? part.value : "";
    } catch (e) {
      return "";
    }
  }

  function sameLocalDay(a, b) {
    return a.getFullYear() === b.getFullYear() && a.getMonth() === b.getMonth() && a.getDate() === b.getDate();
  }

  function localClock(date, seconds) {
    return pad(date.getHours()) + ":" + pad(date.getMinutes()) + (seconds ? ":" + pad(date.getSeconds()) : "");
  }

  function localDateTime(date) {
    return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " + localClock(date, true) + " " + zoneName(date);
  }

  function utcText(date) {
    return date.toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  // strftime's few directives the chart uses, in local time.
  function strftimeLocal(date, format) {
    return format.replace(/%([bdHMS])/g, function (_, d) {
      return { b: MONTHS[date.getMonth()], d: pad(date.getDate()), H: pad(date.getHours()), M: pad(date.getMinutes()), S: pad(date.getSeconds()) }[d];
    });
  }

  function serverNow() {
    return new Date(Date.now() + serverOffsetMs);
  }

  function refDate(el) {
    const holder = el.closest("[data-utc-ref]");
    const at = holder ? new Date(holder.getAttribute("data-utc-ref")) : null;
    return at && !isNaN(at) ? at : serverNow();
  }

  // The instant a "HH:MM[:SS] UTC" phrase names; a phrase without a date is on the reference's UTC day.
  function phraseDate(m, ref) {
    const h = Number(m[6]), mi = Number(m[7]), s = Number(m[8] || 0);
    if (m[1]) return new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]), h, mi, s));
    if (m[4]) {
      let at = new Date(Date.UTC(ref.getUTCFullYear(), MONTHS.indexOf(m[4]), Number(m[5]), h, mi, s));
      if (ref - at > 182 * 86400000) at = new Date(Date.UTC(ref.getUTCFullYear() + 1, MONTHS.indexOf(m[4]), Number(m[5]), h, mi, s));
      return at;
    }
    return new Date(Date.UTC(ref.getUTCFullYear(), ref.getUTCMonth(), ref.getUTCDate(), h, mi, s));
  }

  function localPhrase(at, m, ref) {
    const clock = localClock(at, !!m[8]) + " " + zoneName(at);
    if (m[1]) return at.getFullYear() + "-" + pad(at.getMonth() + 1) + "-" + pad(at.getDate()) + " " + clock;
    return (sameLocalDay(at, ref) ? "" : MONTHS[at.getMonth()] + " " + at.getDate() + " ") + clock;
  }

  function localizeSentence(container) {
    const ref = refDate(container);
    const walker = document.createTreeWalker(container, NodeFilter.SHOW_TEXT);
    const nodes = [];
    while (walker.nextNode()) nodes.push(walker.currentNode);
    nodes.forEach(function (node) {
      if (node.parentElement && node.parentElement.closest("time, code")) return;
      const text = node.nodeValue;
      UTC_PHRASE.lastIndex = 0;
      if (!UTC_PHRASE.test(text)) return;
      UTC_PHRASE.lastIndex = 0;
      const parts = document.createDocumentFragment();
      let last = 0;
      let m;
      while ((m = UTC_PHRASE.exec(text))) {
        const at = phraseDate(m, ref);
        if (isNaN(at)) continue;
        parts.append(text.slice(last, m.index));
        const el = document.createElement("time");
        el.setAttribute("datetime", at.toISOString());
        el.dataset.localized = "1";
        el.title = utcText(at);
        el.textContent = localPhrase(at, m, ref);
        parts.append(el);
        last = m.index + m[0].length;
      }
      parts.append(text.slice(last));
      node.replaceWith(parts);
    });
  }

  function localizeChart(root) {
    root.querySelectorAll("svg text[data-at]").forEach(function (el) {
      const at = new Date(el.getAttribute("data-at"));
      if (isNaN(at)) return;
      el.textContent = (el.dataset.prefix || "") + strftimeLocal(at, el.dataset.fmt || "%H:%M");
    });
    root.querySelectorAll("svg text[data-zone-label]").forEach(function (el) {
      el.textContent = el.dataset.zoneLabel.replace("{zone}", zoneName(serverNow()));
    });
  }

  pd.localize = function (root) {
    root = root || document;
    root.querySelectorAll("[data-utc-text]:not([data-utc-done])").forEach(function (el) {
      el.setAttribute("data-utc-done", "");
      localizeSentence(el);
    });
    root.querySelectorAll("time[datetime]:not([data-localized])").forEach(function (el) {
      const at = new Date(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      el.dataset.localized = "1";
      if (el.dataset.local === "time") el.textContent = localClock(at, true);
      else if (el.dataset.local) el.textContent = localDateTime(at);
      // Absolute times show UTC on hover; relative ones ("in 12 min") both clocks.
      el.title = el.dataset.local ? utcText(at) : localDateTime(at) + " · " + utcText(at);
    });
    localizeChart(root);
    const note = document.querySelector("[data-tz-note]");
    if (note) {
      const now = serverNow();
      let zone = "";
      try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { zone = ""; }
      note.textContent = "times in " + zoneName(now);
      note.title = "Times are shown in your time zone" + (zone ? " (" + zone + ")" : "") + "; hover one for UTC. Exports and printable reports stay in UTC.";
    }
    // Filters typed in local dates and times (the history's range) say which zone they mean.
    const zoneField = document.querySelector("[data-tz-input]");
    if (zoneField && !zoneField.value) {
      let named = "";
      try { named = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { named = ""; }
      if (named) {
        zoneField.value = named;
        document.querySelectorAll("[data-tz-label]").forEach(function (label) { label.textContent = "(" + named + ")"; });
      }
    }
  };

  function refreshTimes(root) {
    const now = Date.now() + serverOffsetMs;
    (root || document).querySelectorAll("time[data-rel]").forEach(function (el) {
      const at = Date.parse(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      const delta = (at - now) / 1000;
      if (el.dataset.rel === "countdown") {
        const label = el.dataset.label || "";
        el.textContent = (Math.abs(delta) < 1 ? label + " now" : delta <= 0 ? label + " passed " + humanDuration(delta) + " ago" : label + " in " + humanDuration(delta)).trim();
        el.classList.toggle("urgency-overdue", delta <= 0);
        el.classList.toggle("urgency-soon", delta > 0 && delta <= 900);
        el.classList.toggle("urgency-later", delta > 900);
      } else {
        el.textContent = Math.abs(delta) < 5 ? "just now" : delta > 0 ? "in " + humanDuration(delta) : humanDuration(delta) + " ago";
      }
    });
  }

  // --- live lists --------------------------------------------------------------------------------------
  pd.live = function () {
    return document.visibilityState === "visible";
  };

  function typingIn(root) {
    const el = document.activeElement;
    return !!(el && root && root.contains(el) && el.matches("input, textarea, select"));
  }

  function cardBusy(card) {
    return !!(
      typingIn(card) ||
      card.querySelector("details[open]") ||
      card.querySelector(".is-armed") ||
      (document.activeElement && card.contains(document.activeElement) && document.activeElement.tagName === "TEXTAREA")
    );
  }

  // A card refreshes itself only when something on it changed (the server answers 204 otherwise),
  // and never while the responder is typing a comment or confirming an option.
  pd.cardLive = function (card) {
    return pd.live() && !cardBusy(card);
  };

  // Live refreshes ("every Ns" on an element with data-poll) are skipped here rather than with
  // hx-trigger filters, which htmx evaluates with Function() and the CSP (no unsafe-eval) refuses.
  // A poll is the only request without a triggering event.
  document.addEventListener("htmx:confirm", function (event) {
    const elt = event.detail.elt;
    const poll = elt && elt.dataset && elt.dataset.poll;
    if (!poll || event.detail.triggeringEvent) return;
    if (poll === "card" ? !pd.cardLive(elt) : !pd.live()) event.preventDefault();
  });

  // Signing out goes on to the identity provider to end its session too. A live refresh answered
  // meanwhile (401 with HX-Redirect to the login page) must not cut that navigation short.
  let signingOut = false;
  document.addEventListener("submit", function (event) {
    if (event.target.closest("form[data-sign-out]")) signingOut = true;
  });
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (signingOut) event.preventDefault();
  });
  document.addEventListener("htmx:beforeOnLoad", function (event) {
    if (signingOut) event.preventDefault();
  });

  // A live refresh is not the person doing something: it says so, and the session's idle timeout
  // (accounts/middleware.py) does not count it as activity.
  document.addEventListener("htmx:configRequest", function (event) {
    const elt = event.detail.elt;
    if (elt && elt.dataset && elt.dataset.poll && !event.detail.triggeringEvent) {
      event.detail.headers["X-Pollerdash-Background"] = "1";
    }
  });

  function ids(root) {
    const meta = root && root.querySelector(".rows-meta");
    return meta ? (meta.dataset.ids || "").split(",").filter(Boolean) : [];
  }

  function cardCounts(list) {
    const counts = {};
    list.forEach(function (id) {
      const group = /^g(\d+)\.(\d+)$/.exec(id);
      if (group) counts["g" + group[1]] = Number(group[2]);
      else counts[id] = 1;
    });
    return counts;
  }

  function showNote(incoming, current) {
    const note = document.getElementById("live-note");
    if (!note) return;
    // Counted in cards: a group row ("g<group>.<open cards>") that grows by one is one new card.
    const now = cardCounts(incoming);
    const before = cardCounts(current);
    let added = 0;
    let gone = 0;
    Object.keys(now).forEach(function (key) { added += Math.max(0, now[key] - (before[key] || 0)); });
    Object.keys(before).forEach(function (key) { gone += Math.max(0, before[key] - (now[key] || 0)); });
    const parts = [];
    if (added) parts.push(added + " new card" + (added > 1 ? "s" : ""));
    if (gone) parts.push(gone + " no longer open");
    if (!parts.length) parts.push("the order changed");
    note.innerHTML = "";
    const text = document.createElement("span");
    text.textContent = parts.join(", ") + " — the list waits while you work on it.";
    const button = document.createElement("button");
    button.type = "button";
    button.className = "btn btn-small";
    button.textContent = "Update the list now";
    button.addEventListener("click", function () {
      forceNext = true;
      const live = document.querySelector("#inbox-live");
      if (live) htmx.trigger(live, "pd:refresh");
    });
    note.append(text, button);
    note.hidden = false;
  }

  function hideNote() {
    const note = document.getElementById("live-note");
    if (note) note.hidden = true;
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    const target = event.detail.target;
    if (!target || !target.hasAttribute("data-live-target") || event.detail.xhr.status !== 200) return;
    const live = target.closest("[data-live-list]");
    const doc = new DOMParser().parseFromString(event.detail.serverResponse, "text/html");
    const title = doc.querySelector("title");
    if (title) document.title = title.textContent;
    // Alerts in this tab (notify.js): every fresh list is announced, even one held back below.
    if (target.id === "inbox-rows") {
      const rows = {};
      doc.querySelectorAll(".row[data-esc]").forEach(function (r) {
        rows[r.dataset.esc] = {
          title: ((r.querySelector(".provider") || {}).textContent || "") + ": " + ((r.querySelector(".row-title") || {}).textContent || "").trim(),
          heading: "Decision needed: " + ((r.querySelector(".chip-reason") || {}).textContent || "a new card"),
          anchor: r.id,
        };
      });
      // A group row is news when it appears or grows: the server words its alert (group, reason, provider).
      doc.querySelectorAll(".grouprow[data-group]").forEach(function (r) {
        rows["g" + r.dataset.group + "." + r.dataset.count] = {
          title: r.dataset.alertBody || "",
          heading: r.dataset.alertTitle || "",
          anchor: r.id,
        };
      });
      document.dispatchEvent(new CustomEvent("pd:inbox", { detail: { ids: ids(doc), rows: rows } }));
    }
    const force = forceNext;
    forceNext = false;
    if (force) {
      hideNote();
      return;
    }
    const incoming = ids(doc);
    const current = ids(target);
    const changed = incoming.join(",") !== current.join(",");
    const working = typingIn(live) || !!live.querySelector(".row.is-open") || !!live.querySelector("details[open]");
    if (working || (pointerInList && (changed || target.id !== "inbox-rows"))) {
      // Never reshuffle rows under the pointer or destroy an open card: hold, and say what changed.
      event.detail.shouldSwap = false;
      // Counts move no rows: keep them (the out-of-band parts) in step with the tab title.
      doc.querySelectorAll("[hx-swap-oob]").forEach(function (fresh) {
        const shown = fresh.id && document.getElementById(fresh.id);
        if (shown) {
          fresh.removeAttribute("hx-swap-oob");
          shown.replaceWith(fresh);
        }
      });
      if (changed) showNote(incoming, current);
      return;
    }
    hideNote();
  });

  // Out-of-band swaps are not the request's target: the operation page's head and body, fetched
  // again after an act (hx-select-oob), are localized as each lands, or they would read in UTC.
  document.addEventListener("htmx:oobAfterSwap", function (event) {
    const root = event.target && event.target.isConnected ? event.target : document;
    pd.localize(root);
    refreshTimes(root);
  });

  document.addEventListener("htmx:afterSwap", function (event) {
    pd.localize(event.detail.target.isConnected ? event.detail.target : document);
    refreshTimes(event.detail.target);
    if (pd.selected) {
      const row = document.getElementById(pd.selected);
      if (row) row.classList.add("is-selected");
    }
  });

  // --- inline cards in the inbox -------------------------------------------------------------------
  function rowOf(el) {
    return el && el.closest(".row");
  }

  function setReviewLabel(row, open) {
    const button = row.querySelector(".btn-review");
    if (!button) return;
    button.setAttribute("aria-expanded", open ? "true" : "false");
    button.firstChild.textContent = open ? "Hide" : "Review";
  }

  pd.toggleCard = function (row, wantOpen) {
    const slot = row.querySelector(".row-card");
    const isOpen = row.classList.contains("is-open");
    if (isOpen && wantOpen !== true) {
      const hadFocus = slot.contains(document.activeElement);
      slot.innerHTML = "";
      row.classList.remove("is-open");
      setReviewLabel(row, false);
      if (hadFocus) row.focus({ preventScroll: true });
      return Promise.resolve(null);
    }
    if (isOpen) return Promise.resolve(slot.querySelector(".card"));
    row.classList.add("is-open");
    setReviewLabel(row, true);
    select(row, false);
    // Once htmx has settled the new card (its forms are wired up only then), the card takes the
    // focus: the number keys act on it, and on no other card.
    return new Promise(function (resolve) {
      const done = function () {
        slot.removeEventListener("htmx:afterSettle", done);
        clearTimeout(timer);
        const card = slot.querySelector(".card");
        if (card && row.classList.contains("is-open")) card.focus({ preventScroll: true });
        resolve(card);
      };
      const timer = setTimeout(done, 4000);
      slot.addEventListener("htmx:afterSettle", done);
      htmx.ajax("GET", row.dataset.cardUrl, { target: slot, swap: "innerHTML" });
    });
  };

  document.addEventListener("click", function (event) {
    const toggle = event.target.closest("[data-toggle-card]");
    if (!toggle || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    const row = rowOf(toggle);
    if (!row) return;
    event.preventDefault();
    pd.toggleCard(row);
  });

  // --- confirmation proportional to the consequence ---------------------------------------------------
  // A touch screen has no keys to press and pops up its keyboard on a focused text box.
  const touchQuery = window.matchMedia ? window.matchMedia("(hover: none) and (pointer: coarse)") : null;
  function touchScreen() {
    return !!(touchQuery && touchQuery.matches);
  }

  function disarm(button) {
    if (!button || !button.classList.contains("is-armed")) return;
    button.classList.remove("is-armed");
    const label = button.querySelector(".opt-label");
    if (label && label.dataset.original) label.textContent = label.dataset.original;
    clearTimeout(button._pdTimer);
  }

  function disarmAll() {
    document.querySelectorAll(".is-armed").forEach(disarm);
  }

  function arm(button) {
    disarmAll();
    const label = button.querySelector(".opt-label");
    if (label) {
      label.dataset.original = label.textContent;
      label.textContent = "Confirm: " + label.dataset.original + (touchScreen() ? " — tap again" : " — click or press again");
    }
    button.classList.add("is-armed");
    button.focus();
    button._pdTimer = setTimeout(function () { disarm(button); }, 8000);
  }

  // Reversible options take two clicks: the first arms the button (its label says what the second does).
  document.addEventListener(
    "click",
    function (event) {
      const button = event.target.closest("button[data-two-step]");
      if (!button || button.classList.contains("is-armed")) return;
      event.preventDefault();
      event.stopPropagation();
      arm(button);
    },
    true
  );

  document.addEventListener("click", function (event) {
    const close = event.target.closest("[data-close-details]");
    if (close) {
      const details = close.closest("details");
      if (details) details.open = false;
    }
    if (!event.target.closest("[data-help]")) return;
    const help = document.getElementById("help");
    if (help && !help.open) help.showModal();
  });

  document.addEventListener("toggle", function (event) {
    const details = event.target;
    if (!(details instanceof HTMLDetailsElement) || !details.open || !details.classList.contains("opt-explicit")) return;
    disarmAll();
    details.parentElement.querySelectorAll("details.opt-explicit[open]").forEach(function (other) {
      if (other !== details) other.open = false;
    });
    // One comment box at a time: the card's own is hidden while a confirmation is open (CSS), so
    // what was already typed there moves into the confirmation's.
    const own = details.querySelector("textarea");
    const card = details.closest(".options") && details.closest(".options").parentElement;
    const shared = card && card.querySelector(".card-comment textarea");
    if (own && shared && shared.value && !own.value) own.value = shared.value;
    if (touchScreen()) {
      // The confirmation in view, and no keyboard popping up over its button: the comment is a tap away.
      details.scrollIntoView({ block: "nearest" });
      return;
    }
    // The comment first: keys typed into it are text, never shortcuts.
    const field = own || details.querySelector(".btn-confirm");
    if (field) field.focus();
  }, true);

  // Inspect opens the provider console in a new tab; afterwards the card shows who looked.
  document.addEventListener("submit", function (event) {
    const form = event.target.closest("form[data-inspect]");
    if (!form) return;
    const card = form.closest(".card");
    setTimeout(function () { if (card && card.isConnected) htmx.trigger(card, "pd:refresh"); }, 1200);
  });

  document.addEventListener("change", function (event) {
    const form = event.target.closest("form[data-autosubmit]");
    if (form) form.requestSubmit();
  });

  // --- keyboard triage ---------------------------------------------------------------------------------
  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll("#inbox-rows .row"));
  }

  function select(row, scroll) {
    rows().forEach(function (r) { r.classList.remove("is-selected"); });
    if (!row) return;
    row.classList.add("is-selected");
    pd.selected = row.id;
    if (scroll !== false) {
      // An open card takes the focus with its row (its keys work); a closed row only shows `o`.
      (row.querySelector(".row-card .card") || row).focus({ preventScroll: true });
      row.scrollIntoView({ block: "nearest" });
    }
  }

  function move(step) {
    const list = rows();
    if (!list.length) return;
    const current = list.findIndex(function (r) { return r.classList.contains("is-selected"); });
    const next = current < 0 ? 0 : Math.max(0, Math.min(list.length - 1, current + step));
    select(list[next]);
  }

  // The card the number keys act on: the open card that holds the focus (opened with o / Enter /
  // Review, or clicked). Never a card the responder did not choose: no card, no action — a number
  // key opens nothing and picks nothing on a closed or merely selected row.
  function focusedCard() {
    const el = document.activeElement;
    const card = el && el.closest ? el.closest(".card[data-card]") : null;
    return card && card.isConnected && card.querySelector(".options") ? card : null;
  }

  function pick(card, index) {
    const option = card.querySelector('[data-option-index="' + index + '"]');
    if (!option) return;
    if (option.tagName === "DETAILS") {
      option.open = true;
      return;
    }
    const button = option.querySelector("button");
    if (button) {
      button.focus();
      button.click();
    }
  }

  // Focus that moves into a row (a click on its open card, Tab) selects that row: `o` and the
  // number keys then agree on which card they mean.
  document.addEventListener("focusin", function (event) {
    const row = event.target.closest && event.target.closest("#inbox-rows .row");
    if (row && !row.classList.contains("is-selected")) select(row, false);
  });

  // A card that refreshes itself (live, or with a decision's answer) is replaced whole: if it held
  // the focus, the fresh copy takes it, so the keys keep acting on the card the responder chose.
  let refocusCard = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    const target = event.detail.target;
    refocusCard = target && target.matches && target.matches(".card[data-card]") && target.contains(document.activeElement) ? target.id : null;
  });
  document.addEventListener("htmx:afterSettle", function () {
    if (!refocusCard) return;
    const card = document.getElementById(refocusCard);
    refocusCard = null;
    if (card && !card.contains(document.activeElement)) card.focus({ preventScroll: true });
  });

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (event.key === "Escape") {
      disarmAll();
      document.querySelectorAll("details.opt-explicit[open]").forEach(function (d) { d.open = false; });
      return;
    }
    if (target.closest("input, textarea, select, [contenteditable]")) return;
    const key = event.key;
    if (gPending && Date.now() - gPending < 1500) {
      gPending = 0;
      const to = { i: "/", o: "/operations/", h: "/history/", s: "/system/" }[key];
      if (to) {
        event.preventDefault();
        window.location.href = to;
      }
      return;
    }
    if (key === "?") {
      event.preventDefault();
      const help = document.getElementById("help");
      if (help && !help.open) help.showModal();
    } else if (key === "j" || key === "k") {
      event.preventDefault();
      move(key === "j" ? 1 : -1);
    } else if (key === "o" || (key === "Enter" && !target.closest("button, a, summary"))) {
      const row = document.querySelector("#inbox-rows .row.is-selected");
      if (row) {
        event.preventDefault();
        pd.toggleCard(row);
      }
    } else if (key === "/") {
      const box = document.querySelector("[data-search-box]");
      if (box) {
        event.preventDefault();
        box.focus();
      }
    } else if (key === "g") {
      gPending = Date.now();
    } else if (/^[1-9]$/.test(key)) {
      const card = focusedCard();
      if (card) {
        event.preventDefault();
        pick(card, Number(key));
      }
    }
  });

  // --- start -------------------------------------------------------------------------------------------
  document.addEventListener("DOMContentLoaded", function () {
    // Hints for keys (kbd.key-hint) show only with this script, and only where the key works (CSS).
    document.documentElement.classList.add("pd-keys");
    // On a touch screen the keys' hints and help give way (CSS): there is no keyboard to press.
    document.documentElement.classList.toggle("pd-touch", touchScreen());
    const serverAt = Number(document.body.dataset.serverNow || 0) * 1000;
    if (serverAt) serverOffsetMs = serverAt - Date.now();
    pd.localize(document);
    const live = document.querySelector("[data-live-list]");
    if (live) {
      live.addEventListener("mouseenter", function () { pointerInList = true; });
      live.addEventListener("mouseleave", function () { pointerInList = false; });
    }
    refreshTimes();
    setInterval(function () { if (document.visibilityState === "visible") refreshTimes(); }, 15000);
    const hash = window.location.hash;
    if (hash && hash.indexOf("#card-") === 0) {
      // A link to this very card (a notification's): it is the one the responder chose.
      const card = document.getElementById(hash.slice(1));
      if (card) {
        card.scrollIntoView({ block: "start" });
        card.focus({ preventScroll: true });
      }
    }
  });
})();
