// The read-only viewer page of jupyter_agents (viewer.py serves it under a strict CSP).
// Output only: nothing typed, no answer to a terminal query, no resize ever leaves this
// page. xterm.js has stdin disabled and no clipboard addon; the socket is never written.
//
// When the socket drops (the owner's server stopped, restarts, or the proxy went away),
// the page says so and connects again, the same grant, with a growing pause (BACKOFF).
// A socket refused before it opens is told apart by asking for this page again,
// redirects followed: the server answers it (try the socket again) or refuses it (403:
// the grant is over for this viewer); the request ends on the hub's login or its page to
// authorize the server (a restarted server on JupyterHub lost the viewer's token; where
// the hub asks nothing, following its redirects signed the viewer in again, and the page
// answers); or anything else (a 5xx of the proxy, the hub's answer for a server not
// running, no answer): away, keep trying. The state is in body[data-state]: connecting,
// watching, away, ended, signin.
(function () {
  'use strict';
  //: seconds before each attempt after an unexpected close (then the last, again)
  var BACKOFF = [1, 2, 4, 8, 15, 30];
  var body = document.body;
  var status = document.getElementById('status');
  var term = new Terminal({
    disableStdin: true,
    cursorBlink: false,
    scrollback: 5000,
    rows: Number(body.dataset.rows) || 24,
    cols: Number(body.dataset.cols) || 80,
    windowOptions: {},
    allowProposedApi: false
  });
  term.open(document.getElementById('terminal'));
  var attempts = 0;
  var finished = false;

  function say(text, state) {
    status.textContent = text;
    body.dataset.state = state;
  }
  function finish(text, state) {
    finished = true;
    say(text, state);
  }
  function signIn() {
    finish("the owner's server restarted: open this page again to sign in ", 'signin');
    var link = document.createElement('a');
    link.href = location.href;
    link.textContent = 'open again';
    status.appendChild(link);
  }
  function retry(why) {
    var wait = BACKOFF[Math.min(attempts, BACKOFF.length - 1)];
    attempts += 1;
    say((why || "the owner's server is away") + '; trying again in ' + wait + ' s', 'away');
    setTimeout(connect, wait * 1000);
  }
  function probe() {
    fetch(location.href, { credentials: 'same-origin', cache: 'no-store' })
      .then(function (response) {
        var path = new URL(response.url).pathname;
        if (response.url === location.href && response.ok) {
          retry('reconnecting'); // the page is ours again: so may the socket be
        } else if (response.url === location.href && response.status < 500) {
          finish('this share is no longer open to you', 'ended'); // our server refuses
        } else if (response.ok && /\/(oauth2\/authorize|login)$/.test(path)) {
          signIn(); // the hub's login, or its page to authorize the server again
        } else {
          retry(); // away: the proxy's 5xx, or the hub's answer for a server not running
        }
      })
      .catch(function () {
        retry();
      });
  }
  function connect() {
    var scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
    var socket = new WebSocket(scheme + location.host + body.dataset.socket);
    var opened = false;
    socket.onopen = function () {
      opened = true;
      attempts = 0;
      say('watching (read-only)', 'watching');
    };
    socket.onmessage = function (event) {
      var message = JSON.parse(event.data);
      if (message[0] === 'setup') {
        term.reset(); // each connection sends the whole screen again
      } else if (message[0] === 'stdout') {
        term.write(message[1]);
      } else if (message[0] === 'disconnect') {
        finish('the session ended', 'ended');
      }
    };
    socket.onclose = function (event) {
      if (finished) {
        return;
      }
      if (event.code === 4003 || event.code === 1008) {
        // the grant ended (revoked, expired, the hub no longer lets us in), or input
        finish('disconnected' + (event.reason ? ': ' + event.reason : ''), 'ended');
      } else if (opened) {
        retry();
      } else {
        probe();
      }
    };
  }
  say('connecting...', 'connecting');
  connect();
})();
