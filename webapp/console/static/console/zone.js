// The viewer's time zone for the server (webapp.core.timezones): its IANA name in the `tz`
// cookie, so every page after the first (the login page, usually) shows local times.
(function () {
  "use strict";
  let zone = "";
  try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { return; }
  if (zone) {
    document.cookie = "tz=" + encodeURIComponent(zone) + "; path=/; max-age=31536000; SameSite=Lax";
  }
})();
