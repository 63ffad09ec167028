// jupyter_agents' service worker, served at {base_url}agents/sw.js with the scope
// {base_url}agents/ (never wider: on JupyterHub that would cover other users' pages).
// It shows a permission request pushed by the server (jupyter_agents/notify/notice.py,
// Notice.push_payload) with Allow and Deny actions; an action posts that choice's
// single-use answer link, a tap elsewhere opens the confirmation page. It sends no
// cookie and keeps nothing: the answer link is the only credential.
"use strict";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("push", (event) => {
  let data;
  try {
    data = event.data ? event.data.json() : null;
  } catch (e) {
    data = null;
  }
  if (!data || data.type !== "permission-request") {
    return;
  }
  const tokens = {};
  for (const a of data.actions || []) {
    tokens[a.action] = a.token;
  }
  const actions = (data.actions || [])
    .filter((a) => a.action === "allow" || a.action === "deny")
    .map((a) => ({ action: a.action, title: a.title }));
  event.waitUntil(
    self.registration.showNotification(data.title, {
      body: `${data.kind} · ${data.tool}: ${data.command}`,
      tag: `jupyter-agents-${data.request}`,
      requireInteraction: true,
      data: { url: data.url, tokens },
      actions,
    }),
  );
});

async function answer(notification, token) {
  const url = new URL(`act/${encodeURIComponent(token)}`, self.registration.scope);
  let said = "";
  let ok = false;
  try {
    const response = await fetch(url.href, {
      method: "POST",
      headers: { Accept: "application/json" },
      credentials: "omit",
    });
    ok = response.ok;
    said = (await response.json()).message || "";
  } catch (e) {
    said = "The server could not be reached.";
  }
  await self.registration.showNotification(ok ? said : "Not answered", {
    body: ok ? "" : said,
    tag: notification.tag,
  });
}

// What a click on a notification does: an action (Allow, Deny) posts its answer link and
// says how that went; a tap elsewhere opens the confirmation page. A promise that
// settles when done (the listener's waitUntil).
async function clicked(notification, action) {
  const data = notification.data || {};
  notification.close();
  const token = action && data.tokens ? data.tokens[action] : undefined;
  if (token) {
    return answer(notification, token);
  }
  if (data.url) {
    await self.clients.openWindow(new URL(data.url, self.registration.scope).href);
  }
}

self.addEventListener("notificationclick", (event) => {
  event.waitUntil(clicked(event.notification, event.action));
});
