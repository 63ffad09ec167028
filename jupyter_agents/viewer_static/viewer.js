// The read-only viewer page of jupyter_agents (viewer.py serves it under a strict CSP).
// Output only: nothing typed, no answer to a terminal query, no resize ever leaves this
// page. xterm.js has stdin disabled and no clipboard addon; the socket is never written.
(function () {
  'use strict';
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
  function say(text) {
    status.textContent = text;
  }
  var scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
  var socket = new WebSocket(scheme + location.host + body.dataset.socket);
  socket.onopen = function () {
    say('watching (read-only)');
  };
  socket.onmessage = function (event) {
    var message = JSON.parse(event.data);
    if (message[0] === 'stdout') {
      term.write(message[1]);
    } else if (message[0] === 'disconnect') {
      say('the session ended');
    }
  };
  socket.onclose = function (event) {
    say('disconnected' + (event.reason ? ': ' + event.reason : ''));
  };
})();
