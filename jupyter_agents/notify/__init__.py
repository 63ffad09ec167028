"""Reaching the owner away from JupyterLab: answer tokens for permission requests
(:mod:`.tokens`), what a notification carries (:mod:`.notice`), the channels that carry
it (Web Push: :mod:`.webpush`, :mod:`.subscriptions`; ntfy: :mod:`.ntfy`) and the
:mod:`.notifier` that decides when to send. Below the server, above the sessions wing;
nothing here imports jupyter_server."""
