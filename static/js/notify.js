// pollerdash inbox alerts: a desktop notification when cards arrive while the tab is hidden or
// unfocused, a marker in the tab title, and an optional short beep. Permission is asked only when
// the person clicks "Desktop notifications" (never on load: browsers penalise sites that ask
// unprompted, and people deny a prompt they did not ask for). Nothing here moves or blinks, so
// prefers-reduced-motion needs no special case; no inline script or style (CSP without
// 'unsafe-inline'): the controls are server-rendered buttons, state is shown with attributes.
//
// Loaded after app.js on the inbox page. app.js announces each fresh list with a "pd:inbox" event
// ({ids, rows: {id: {title, reason}}}); this file remembers which ids it has seen in this
// tab, so a reload or a list held back while someone works never announces the same card twice.
(function () {
  "use strict";

  const pd = (window.pd = window.pd || {});
  const PREFS_KEY = "pd.alerts"; // localStorage: {"desktop": bool, "sound": bool}
  const SEEN_KEY = "pd.seenCards"; // sessionStorage: ids already shown or announced in this tab
  const HIDDEN_POLL_MS = 30000; // a hidden tab still checks this often when alerts are on
  const BEEP_GAP_MS = 10000; // at most one beep per 10 s, however many cards arrive
  const MARK = "\u25cf "; // "● " before the title while arrivals are unseen

  let seen = null; // Set of ids, loaded lazily
  let unseen = 0;
  let audio = null; // an AudioContext, created on the click that turns sound on
  let lastBeep = 0;
  let lastHiddenPoll = 0;

  function prefs() {
    try {
      const stored = JSON.parse(window.localStorage.getItem(PREFS_KEY) || "{}");
      return { desktop: stored.desktop === true, sound: stored.sound === true };
    } catch (e) {
      return { desktop: false, sound: false };
    }
  }

  function savePrefs(value) {
    try {
      window.localStorage.setItem(PREFS_KEY, JSON.stringify(value));
    } catch (e) {
      // Private mode or a full store: the choice lasts for this page only.
    }
  }

  function permission() {
    return "Notification" in window ? window.Notification.permission : "unsupported";
  }

  function desktopOn() {
    return prefs().desktop && permission() === "granted";
  }

  function away() {
    return document.visibilityState !== "visible" || !document.hasFocus();
  }

  // --- the controls ---------------------------------------------------------------------------------
  function render() {
    const p = prefs();
    const state = permission();
    document.querySelectorAll("[data-alerts-desktop]").forEach(function (button) {
      button.hidden = state === "unsupported";
      button.disabled = state === "denied";
      button.setAttribute("aria-pressed", desktopOn() ? "true" : "false");
      button.textContent =
        state === "denied"
          ? "Desktop notifications blocked in this browser's site settings"
          : "Desktop notifications: " + (desktopOn() ? "on" : "off");
    });
    document.querySelectorAll("[data-alerts-sound]").forEach(function (button) {
      button.hidden = !(window.AudioContext || window.webkitAudioContext);
      button.setAttribute("aria-pressed", p.sound ? "true" : "false");
      button.textContent = "Sound: " + (p.sound ? "on" : "off");
    });
  }

  document.addEventListener("click", function (event) {
    const desktop = event.target.closest("[data-alerts-desktop]");
    if (desktop) {
      const p = prefs();
      if (permission() === "granted") {
        p.desktop = !p.desktop;
        savePrefs(p);
        render();
      } else if (permission() === "default") {
        // Inside the click handler: the only place a permission prompt is allowed to start.
        window.Notification.requestPermission().then(function (answer) {
          p.desktop = answer === "granted";
          savePrefs(p);
          render();
        });
      }
      return;
    }
    const sound = event.target.closest("[data-alerts-sound]");
    if (sound) {
      const p = prefs();
      p.sound = !p.sound;
      savePrefs(p);
      if (p.sound) {
        unlockAudio();
        beep(); // a preview, so the person knows what it will sound like
      }
      render();
    }
  });

  // --- sound: a generated beep (WebAudio needs no media file and no CSP media-src) --------------------
  function unlockAudio() {
    const Context = window.AudioContext || window.webkitAudioContext;
    if (!audio && Context) audio = new Context();
    if (audio && audio.state === "suspended") audio.resume();
  }

  function beep() {
    if (!audio) return; // never created without a click: autoplay rules would block it anyway
    const now = Date.now();
    if (now - lastBeep < BEEP_GAP_MS) return;
    lastBeep = now;
    const start = audio.currentTime;
    const tone = audio.createOscillator();
    const gain = audio.createGain();
    tone.type = "sine";
    tone.frequency.setValueAtTime(880, start);
    tone.frequency.setValueAtTime(660, start + 0.12);
    gain.gain.setValueAtTime(0.0001, start);
    gain.gain.exponentialRampToValueAtTime(0.2, start + 0.02);
    gain.gain.exponentialRampToValueAtTime(0.0001, start + 0.25);
    tone.connect(gain).connect(audio.destination);
    tone.start(start);
    tone.stop(start + 0.26);
  }

  // --- the tab title ------------------------------------------------------------------------------------
  function markTitle() {
    const plain = document.title.indexOf(MARK) === 0 ? document.title.slice(MARK.length) : document.title;
    document.title = unseen > 0 ? MARK + plain : plain;
  }

  function backAtTheTab() {
    if (away()) return;
    unseen = 0;
    markTitle();
  }

  document.addEventListener("visibilitychange", backAtTheTab);
  // htmx puts the fragment's <title> back after every swap: keep the marker on it.
  document.addEventListener("htmx:afterSettle", markTitle);
  window.addEventListener("focus", backAtTheTab);

  // --- arrivals -------------------------------------------------------------------------------------------
  function loadSeen() {
    if (seen) return seen;
    try {
      seen = new Set(JSON.parse(window.sessionStorage.getItem(SEEN_KEY) || "[]"));
    } catch (e) {
      seen = new Set();
    }
    return seen;
  }

  function saveSeen() {
    try {
      // Only the newest 500: an inbox page never shows more than that.
      window.sessionStorage.setItem(SEEN_KEY, JSON.stringify(Array.from(seen).slice(-500)));
    } catch (e) {
      // A full store only means a reload may announce a card again.
    }
  }

  // A card is news once; a group row ("g<group>.<open cards>") only when it appears or grows: one of
  // its cards decided is no arrival.
  function isNews(id, known) {
    if (known.has(id)) return false;
    const group = /^g(\d+)\.(\d+)$/.exec(id);
    if (!group) return true;
    return !Array.from(known).some(function (seen) {
      const other = /^g(\d+)\.(\d+)$/.exec(seen);
      return other && other[1] === group[1] && Number(other[2]) >= Number(group[2]);
    });
  }

  function announce(fresh, rows) {
    if (!fresh.length) return;
    if (away()) {
      unseen += fresh.length;
      markTitle();
    }
    if (desktopOn() && away()) {
      const first = rows[fresh[0]] || {};
      const title = fresh.length === 1 ? first.heading || "Decision needed" : fresh.length + " new cards need a decision";
      const body = fresh
        .slice(0, 3)
        .map(function (id) { return (rows[id] && rows[id].title) || ""; })
        .filter(Boolean)
        .join("\n");
      const note = new window.Notification(title, { body: body, tag: "pollerdash-inbox", renotify: true });
      note.onclick = function () {
        window.focus();
        const row = document.getElementById(first.anchor || "esc-" + fresh[0]);
        if (row) row.scrollIntoView({ block: "nearest" });
        note.close();
      };
    }
    if (prefs().sound) beep();
  }

  document.addEventListener("pd:inbox", function (event) {
    const detail = event.detail || {};
    const ids = (detail.ids || []).map(String);
    const known = loadSeen();
    const fresh = ids.filter(function (id) { return isNews(id, known); });
    fresh.forEach(function (id) { known.add(id); });
    saveSeen();
    announce(fresh, detail.rows || {});
    // app.js has just put the server's title back: keep the unseen marker on it.
    markTitle();
  });

  // A hidden tab keeps checking, slowly, when it has something to alert with: app.js polls only
  // while the tab is visible, which would leave a background inbox deaf to new cards.
  const visibleOnly = pd.live;
  pd.live = function () {
    if (document.visibilityState === "visible") return visibleOnly ? visibleOnly() : true;
    if (!(desktopOn() || prefs().sound)) return false;
    const now = Date.now();
    if (now - lastHiddenPoll < HIDDEN_POLL_MS) return false;
    lastHiddenPoll = now;
    return true;
  };

  function start() {
    // The cards on the page when it loads are not arrivals: remember them without a word.
    const meta = document.querySelector("#inbox-rows .rows-meta");
    if (meta) {
      const known = loadSeen();
      (meta.dataset.ids || "").split(",").filter(Boolean).forEach(function (id) { known.add(id); });
      saveSeen();
    }
    render();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
