"""Webhook callbacks, the whole feature (the Deltacloud tracker's design): registration.py (a callback:
what it is for, its signing secrets, how it is shown), hooks.py (which hooks may be called, and a hook as
anyone but its owner sees it), webhook.py (what a receiver is sent, signed), egress.py (the call itself),
summary.py and view.py (what the enabled callbacks can match, and upsert's cached read of it), registry.py
(registering them: the api's and the CLI's), store.py (what notify reads and writes). The api, notify and
upsert serve it; the delivery on the callback topics is a contract (dcm_status_contracts.delivery)."""
