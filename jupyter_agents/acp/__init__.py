"""Agent Client Protocol sessions (issue 58): an ACP agent's stdio held by a proxy under
the same owner as terminals (:mod:`.proxy`), its messages journaled (:mod:`.journal`),
and the server's end of it (:mod:`.client`), which may come and go while the agent
runs on."""
